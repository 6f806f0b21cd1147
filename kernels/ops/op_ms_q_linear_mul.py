"""com.microsoft QLinearMul: 8-bit A * B requantized to C, in onnxruntime's float32 steps.

The centred product (a - a_zp) * (b - b_zp) is exact (at most 2^16), made a float32, times
a_scale * b_scale / c_scale (float32), rounded half to even, plus c_zp, saturated.
"""
import numpy as np

from ._contrib import QLinearBinary
from ._quant import quantize


class QLinearMul_1(QLinearBinary):
    def combine(self, a, b, a_scale, a_zp, b_scale, b_zp, c_scale, c_zp, dtype):
        xp = self.xp
        product = xp.multiply(xp.subtract(a, a_zp, dtype=np.int32), xp.subtract(b, b_zp, dtype=np.int32))
        c = xp.multiply(product, a_scale * b_scale / c_scale, dtype=np.float32)
        return quantize(xp, c, c_zp, dtype)
