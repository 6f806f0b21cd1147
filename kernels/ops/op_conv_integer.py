"""ConvInteger: convolution of (x - x_zero_point) with (w - w_zero_point), exact int32 result."""
import numpy as np

from ._conv import conv
from ._quant import centred
from .base import Kernel


class ConvInteger_10(Kernel):
    attributes = {"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None,
                  "pads": None, "strides": None}

    def run(self, x, w, x_zero_point=None, w_zero_point=None):
        channel_shape = (-1,) + (1,) * (w.ndim - 1) if w_zero_point is not None and w_zero_point.size > 1 else None
        acc = conv(self.xp, centred(x, x_zero_point), centred(w, w_zero_point, channel_shape), None, self.group,
                   self.kernel_shape, self.strides, self.dilations, self.pads, self.auto_pad)
        return (acc.astype(np.int32),)
