"""Tanh: hyperbolic tangent of each element."""
from ._ufunc import Ufunc


class Tanh_6(Ufunc):
    ufunc, cuda = "tanh", "tanh(in0)"
