"""Add: a + b under broadcasting."""
from ._legacy_broadcast import LegacyBroadcast
from ._ufunc import Ufunc


class Add_7(Ufunc):
    ufunc, cuda = "add", "in0 + in1"


class Add_1(LegacyBroadcast, Add_7):
    """Opsets 1-6: broadcasting only when asked, B aligned at `axis`."""
