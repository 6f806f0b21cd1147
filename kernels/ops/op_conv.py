"""Conv: N-d convolution with groups, dilations, strides and pads (GEMM plans in _conv)."""
import numpy as np

from ._conv import conv
from .base import Kernel


class Conv_1(Kernel):
    attributes = {"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None,
                  "pads": None, "strides": None}

    def run(self, x, w, b=None):
        return self.run_with_relu(x, w, b, relu=False)

    def run_with_relu(self, x, w, b, relu: bool, chain=None):
        """Conv, then ReLU when `relu`, then `chain` (ConvActivation's), in the same pass where the plan allows."""
        # half precision accumulates in float32 (NumPy has no half GEMM; sums in half drift)
        acc = np.float32 if x.dtype.itemsize < 4 else x.dtype
        if chain is not None and x.dtype != acc:
            y = conv(self.xp, x, w, b, self.group, self.kernel_shape, self.strides, self.dilations,
                     self.pads, self.auto_pad, acc_dtype=acc, relu=relu)
            return (chain[2](y.astype(x.dtype, copy=False)),)
        y = conv(self.xp, x, w, b, self.group, self.kernel_shape, self.strides, self.dilations,
                 self.pads, self.auto_pad, acc_dtype=acc, relu=relu, chain=chain)
        return (y.astype(x.dtype, copy=False),)
