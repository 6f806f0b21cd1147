"""ConvInteger: convolution of (x - x_zero_point) with (w - w_zero_point), exact int32 result.

In float32 when no sum can reach 2^24 (K = C/group · kernel taps terms, each at most
max|x - x_zp| · max|w - w_zp|), else in float64; the centred weights are made once (`CentredWeight`).
"""
import math

import numpy as np

from ._conv import conv
from ._quant import FLOAT32_EXACT, CentredWeight, centred, span
from .base import Kernel


class ConvInteger_10(Kernel):
    attributes = {"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None,
                  "pads": None, "strides": None}

    def setup(self):
        self.weight = CentredWeight()

    def run(self, x, w, x_zero_point=None, w_zero_point=None):
        channel_shape = (-1,) + (1,) * (w.ndim - 1) if w_zero_point is not None and w_zero_point.size > 1 else None
        x_max = span(x.dtype, None if x_zero_point is None else self.host(x_zero_point))
        w_max = span(w.dtype, None if w_zero_point is None else self.host(w_zero_point))
        dtype = np.float32 if math.prod(w.shape[1:]) * x_max * w_max < FLOAT32_EXACT else np.float64
        wc = self.weight.get(self.xp, w, w_zero_point, channel_shape, dtype)
        acc = conv(self.xp, centred(x, x_zero_point, dtype=dtype), wc, None, self.group,
                   self.kernel_shape, self.strides, self.dilations, self.pads, self.auto_pad)
        return (acc.astype(np.int32),)
