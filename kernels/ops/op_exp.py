"""Exp: e to the power of each element."""
from ._ufunc import Ufunc


class Exp_6(Ufunc):
    ufunc, cuda = "exp", "exp(in0)"
