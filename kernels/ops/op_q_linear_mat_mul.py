"""QLinearMatMul: quantized a @ b requantized to y's scale and zero point.

The int32 product is exact (`integer_matmul`, float32 BLAS over bounded slices of K; b centred once
while it is a constant); requantization follows onnxruntime: a_scale * b_scale / y_scale in float32
(per row of a, per column of b), then `requantize` in float32.
"""
import numpy as np

from ._quant import CentredWeight, integer_matmul, requantize, span
from .base import Kernel


class QLinearMatMul_10(Kernel):
    def setup(self):
        self.weight = CentredWeight()

    def run(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point=None):
        if a_zero_point is not None and a_zero_point.size > 1:  # per row of a
            a_zero_point = a_zero_point.reshape(-1, 1)
        if a_scale.size > 1:
            a_scale = a_scale.reshape(-1, 1)
        b_max = span(b.dtype, None if b_zero_point is None else self.host(b_zero_point))
        acc = integer_matmul(self.xp, a, a_zero_point, self.weight.get(self.xp, b, b_zero_point), b_max)
        multiplier = a_scale.astype(np.float32) * b_scale.astype(np.float32) / y_scale.astype(np.float32)
        dtype = y_zero_point.dtype if y_zero_point is not None else a.dtype
        return (requantize(self.xp, acc, multiplier, y_zero_point, dtype),)
