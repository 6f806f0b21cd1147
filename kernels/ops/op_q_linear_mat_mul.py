"""QLinearMatMul: quantized a @ b requantized to y's scale and zero point."""
from ._quant import centred, requantize
from .base import Kernel


class QLinearMatMul_10(Kernel):
    def run(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point=None):
        row_shape = (-1, 1) if a_zero_point is not None and a_zero_point.size > 1 else None
        acc = self.xp.matmul(centred(a, a_zero_point, row_shape), centred(b, b_zero_point))
        a_scale = a_scale.reshape(row_shape) if a_scale.size > 1 else a_scale
        multiplier = a_scale * b_scale / y_scale
        dtype = y_zero_point.dtype if y_zero_point is not None else a.dtype
        return (requantize(self.xp, acc, multiplier, y_zero_point, dtype),)
