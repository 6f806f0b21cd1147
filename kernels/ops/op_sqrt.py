"""Sqrt: square root of each element."""
from ._ufunc import Ufunc


class Sqrt_6(Ufunc):
    ufunc, cuda = "sqrt", "sqrt(in0)"
