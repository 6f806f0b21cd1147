"""Cos: cosine of each element."""
from ._ufunc import Ufunc


class Cos_7(Ufunc):
    ufunc, cuda = "cos", "cos(in0)"
