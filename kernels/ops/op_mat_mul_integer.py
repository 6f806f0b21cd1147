"""MatMulInteger: (A - a_zero_point) @ (B - b_zero_point) accumulated exactly into int32."""
import numpy as np

from ._quant import centred
from .base import Kernel


class MatMulInteger_10(Kernel):
    def run(self, a, b, a_zero_point=None, b_zero_point=None):
        row_shape = (-1, 1) if a_zero_point is not None and a_zero_point.size > 1 else None
        acc = self.xp.matmul(centred(a, a_zero_point, row_shape), centred(b, b_zero_point))
        return (acc.astype(np.int32),)
