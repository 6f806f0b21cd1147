"""Abs: |x| of each element."""
from ._ufunc import Ufunc


class Abs_6(Ufunc):
    ufunc, cuda = "absolute", "in0 < 0 ? -in0 : in0"
