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
        multiplier = x_scale.astype(np.float32) * w_scale.astype(np.float32) / y_scale.astype(np.float32)
        dtype = y_zero_point.dtype if y_zero_point is not None else x.dtype
        requantization = None
        if self.xp is np:   # the compiled convolution requantizes in the same call
            zero_point = 0 if y_zero_point is None else int(self.host(y_zero_point).reshape(-1)[0])
            requantization = (np.ascontiguousarray(multiplier.reshape(-1)), zero_point, dtype)
            bias = None if bias is None else np.ascontiguousarray(bias.reshape(-1), np.int32)
        acc = self.accumulate(x, x_zero_point, w, w_zero_point, bias, requantization)
        if acc.dtype == dtype:
            return (acc,)
        acc = acc.astype(np.int32)
        channel = (1, -1) + (1,) * (x.ndim - 2)
        if bias is not None:
            acc += bias.astype(np.int32, copy=False).reshape(channel)
        if multiplier.size > 1:
            multiplier = multiplier.reshape(channel)
        return (requantize(self.xp, acc, multiplier, y_zero_point, dtype),)
