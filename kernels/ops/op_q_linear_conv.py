"""QLinearConv: quantized convolution (per-tensor or per-output-channel weights), requantized to y."""
import numpy as np

from ._conv import conv
from ._quant import centred, requantize
from .base import Kernel


class QLinearConv_10(Kernel):
    attributes = {"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None,
                  "pads": None, "strides": None}

    def run(self, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point=None, bias=None):
        per_channel = (-1,) + (1,) * (w.ndim - 1)
        w_zp_shape = per_channel if w_zero_point is not None and w_zero_point.size > 1 else None
        acc = conv(self.xp, centred(x, x_zero_point), centred(w, w_zero_point, w_zp_shape),
                   None if bias is None else bias.astype(np.float64), self.group, self.kernel_shape,
                   self.strides, self.dilations, self.pads, self.auto_pad)
        if w_scale.size > 1:
            w_scale = w_scale.reshape((1, -1) + (1,) * (x.ndim - 2))
        multiplier = x_scale * w_scale / y_scale
        dtype = y_zero_point.dtype if y_zero_point is not None else x.dtype
        return (requantize(self.xp, acc, multiplier, y_zero_point, dtype),)
