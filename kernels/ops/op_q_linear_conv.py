"""QLinearConv: quantized convolution (per-tensor or per-output-channel weights), requantized to y.

The int32 accumulator (plus the int32 bias) is exact; requantization follows onnxruntime: the
multiplier x_scale * w_scale / y_scale in float32, then `requantize` in float32.
"""
import numpy as np

from ._conv import IntegerConv
from ._quant import requantize
from .base import Kernel


class QLinearConv_10(IntegerConv, Kernel):
    attributes = IntegerConv.CONV_ATTRIBUTES

    def run(self, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point=None, bias=None):
        acc = self.accumulate(x, x_zero_point, w, w_zero_point)
        channel = (1, -1) + (1,) * (x.ndim - 2)
        if bias is not None:
            acc += bias.astype(np.int32, copy=False).reshape(channel)
        if w_scale.size > 1:
            w_scale = w_scale.reshape(channel)
        multiplier = x_scale.astype(np.float32) * w_scale.astype(np.float32) / y_scale.astype(np.float32)
        dtype = y_zero_point.dtype if y_zero_point is not None else x.dtype
        return (requantize(self.xp, acc, multiplier, y_zero_point, dtype),)
