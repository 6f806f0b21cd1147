"""Tan: tangent of each element."""
from ._ufunc import Ufunc


class Tan_7(Ufunc):
    ufunc, cuda = "tan", "tan(in0)"
