"""MatMulInteger: (A - a_zero_point) @ (B - b_zero_point) accumulated exactly into int32."""
from ._quant import CentredWeight, integer_matmul, span
from .base import Kernel


class MatMulInteger_10(Kernel):
    def setup(self):
        self.weight = CentredWeight()

    def run(self, a, b, a_zero_point=None, b_zero_point=None):
        if a_zero_point is not None and a_zero_point.size > 1:  # per row of A
            a_zero_point = a_zero_point.reshape(-1, 1)
        b_max = span(b.dtype, None if b_zero_point is None else self.host(b_zero_point))
        return (integer_matmul(self.xp, a, a_zero_point, self.weight.get(self.xp, b, b_zero_point), b_max),)
