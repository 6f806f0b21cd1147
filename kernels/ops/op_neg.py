"""Neg: -x of each element."""
from ._ufunc import Ufunc


class Neg_6(Ufunc):
    ufunc, cuda = "negative", "-in0"
