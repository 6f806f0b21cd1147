"""com.microsoft QLinearAdd: 8-bit A + B requantized to C, in onnxruntime's float32 steps.

onnxruntime (AVX2) folds the zero points into one constant, fixed = c_zp - (a_ratio * a_zp + b_ratio * b_zp)
with ratios = scale / c_scale, then computes fma(a, a_ratio, fma(b, b_ratio, fixed)) and rounds half to
even, saturating. An input broadcast along the innermost axis is folded into the constant first
(fixed + b * b_ratio, then one fma). A float32 fma is emulated exactly in float64: an 8-bit integer
times a float32 needs 32 bits and the sum stays within float64's 53, so only the final cast rounds.
"""
import numpy as np

from ._contrib import QLinearBinary, scalar_side
from ._quant import quantize


def _fma32(xp, x, ratio, addend):
    """float32(x * ratio + addend) rounded once, x integer, ratio and addend float32."""
    y = xp.multiply(x, np.float64(ratio), dtype=np.float64)
    y = xp.add(y, addend, out=y) if np.broadcast_shapes(y.shape, np.shape(addend)) == y.shape else y + addend
    return y.astype(np.float32)


class QLinearAdd_1(QLinearBinary):
    def combine(self, a, b, a_scale, a_zp, b_scale, b_zp, c_scale, c_zp, dtype):
        xp = self.xp
        a_ratio, b_ratio = a_scale / c_scale, b_scale / c_scale
        fixed = np.float32(c_zp) - (a_ratio * np.float32(a_zp) + b_ratio * np.float32(b_zp))
        side = scalar_side(a.shape, b.shape)
        if side == "b":
            c = _fma32(xp, a, a_ratio, (fixed + b.astype(np.float32) * b_ratio).astype(np.float64))
        elif side == "a":
            c = _fma32(xp, b, b_ratio, (fixed + a.astype(np.float32) * a_ratio).astype(np.float64))
        else:
            c = _fma32(xp, a, a_ratio, _fma32(xp, b, b_ratio, np.float64(fixed)).astype(np.float64))
        return quantize(xp, c, None, dtype)
