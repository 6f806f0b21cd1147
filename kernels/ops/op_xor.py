"""Xor: logical a xor b under broadcasting."""
from ._ufunc import Ufunc


class Xor_7(Ufunc):
    ufunc, cuda = "logical_xor", "in0 != in1"
