"""BitwiseAnd: bitwise a and b of integer tensors under broadcasting."""
from ._ufunc import Ufunc


class BitwiseAnd_18(Ufunc):
    ufunc, cuda = "bitwise_and", "in0 & in1"
