"""Ceil: smallest integer not below each element."""
from ._ufunc import Ufunc


class Ceil_6(Ufunc):
    ufunc, cuda = "ceil", "ceil(in0)"
