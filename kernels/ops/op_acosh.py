"""Acosh: inverse hyperbolic cosine of each element."""
from ._ufunc import Ufunc


class Acosh_9(Ufunc):
    ufunc, cuda = "arccosh", "acosh(in0)"
