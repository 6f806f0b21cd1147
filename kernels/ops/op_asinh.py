"""Asinh: inverse hyperbolic sine of each element."""
from ._ufunc import Ufunc


class Asinh_9(Ufunc):
    ufunc, cuda = "arcsinh", "asinh(in0)"
