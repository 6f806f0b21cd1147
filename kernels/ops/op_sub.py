"""Sub: a - b under broadcasting."""
from ._legacy_broadcast import LegacyBroadcast
from ._ufunc import Ufunc


class Sub_7(Ufunc):
    ufunc, cuda = "subtract", "in0 - in1"


class Sub_1(LegacyBroadcast, Sub_7):
    """Opsets 1-6: broadcasting only when asked, B aligned at `axis`."""
