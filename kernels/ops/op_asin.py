"""Asin: arcsine of each element."""
from ._ufunc import Ufunc


class Asin_7(Ufunc):
    ufunc, cuda = "arcsin", "asin(in0)"
