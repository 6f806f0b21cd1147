"""BitwiseNot: bitwise complement of an integer tensor."""
from ._ufunc import Ufunc


class BitwiseNot_18(Ufunc):
    ufunc, cuda = "invert", "~in0"
