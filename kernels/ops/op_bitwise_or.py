"""BitwiseOr: bitwise a or b of integer tensors under broadcasting."""
from ._ufunc import Ufunc


class BitwiseOr_18(Ufunc):
    ufunc, cuda = "bitwise_or", "in0 | in1"
