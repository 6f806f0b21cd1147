"""Cosh: hyperbolic cosine of each element."""
from ._ufunc import Ufunc


class Cosh_9(Ufunc):
    ufunc, cuda = "cosh", "cosh(in0)"
