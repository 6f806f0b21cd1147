"""Sinh: hyperbolic sine of each element."""
from ._ufunc import Ufunc


class Sinh_9(Ufunc):
    ufunc, cuda = "sinh", "sinh(in0)"
