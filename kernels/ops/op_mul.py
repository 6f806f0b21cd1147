"""Mul: a * b under broadcasting."""
from ._ufunc import Ufunc


class Mul_7(Ufunc):
    ufunc, cuda = "multiply", "in0 * in1"
