"""Reciprocal: 1/x of each element."""
from ._ufunc import Ufunc


class Reciprocal_6(Ufunc):
    ufunc, cuda = "reciprocal", "1 / in0"
