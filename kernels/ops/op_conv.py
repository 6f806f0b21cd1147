"""Conv: N-d convolution with groups, dilations, strides and pads (GEMM plans in _conv)."""
import numpy as np

from ._conv import conv
from .base import Kernel


class Conv_1(Kernel):
    attributes = {"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None,
                  "pads": None, "strides": None}

    def run(self, x, w, b=None):
        # half precision accumulates in float32 (NumPy has no half GEMM; sums in half drift)
        acc = np.float32 if x.dtype.itemsize < 4 else x.dtype
        y = conv(self.xp, x, w, b, self.group, self.kernel_shape, self.strides, self.dilations,
                 self.pads, self.auto_pad, acc_dtype=acc)
        return (y.astype(x.dtype, copy=False),)
