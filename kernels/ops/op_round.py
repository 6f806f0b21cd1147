"""Round: each element rounded to the nearest integer, halves to even."""
from ._ufunc import Ufunc


class Round_11(Ufunc):
    ufunc, cuda = "rint", "rint(in0)"
