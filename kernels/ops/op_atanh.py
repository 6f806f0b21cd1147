"""Atanh: inverse hyperbolic tangent of each element."""
from ._ufunc import Ufunc


class Atanh_9(Ufunc):
    ufunc, cuda = "arctanh", "atanh(in0)"
