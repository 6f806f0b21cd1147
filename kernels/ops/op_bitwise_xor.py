"""BitwiseXor: bitwise a xor b of integer tensors under broadcasting."""
from ._ufunc import Ufunc


class BitwiseXor_18(Ufunc):
    ufunc, cuda = "bitwise_xor", "in0 ^ in1"
