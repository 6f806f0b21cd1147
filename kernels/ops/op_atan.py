"""Atan: arctangent of each element."""
from ._ufunc import Ufunc


class Atan_7(Ufunc):
    ufunc, cuda = "arctan", "atan(in0)"
