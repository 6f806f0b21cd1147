"""Acos: arccosine of each element."""
from ._ufunc import Ufunc


class Acos_7(Ufunc):
    ufunc, cuda = "arccos", "acos(in0)"
