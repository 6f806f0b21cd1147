"""Mul: a * b under broadcasting."""
from ._legacy_broadcast import LegacyBroadcast
from ._ufunc import Ufunc


class Mul_7(Ufunc):
    ufunc, cuda = "multiply", "in0 * in1"


class Mul_1(LegacyBroadcast, Mul_7):
    """Opsets 1-6: broadcasting only when asked, B aligned at `axis`."""
