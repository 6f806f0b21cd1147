"""com.microsoft QLinearAveragePool: 8-bit windowed mean, in onnxruntime's float32 steps.

onnxruntime dequantizes x (x_scale * (x - x_zp), float32), sums each window in row-major tap
order in float32, divides by the count (the kernel size with count_include_pad, even over the
ceil-mode overhang; else the real cells), then quantizes as round(y / y_scale + y_zp), half to
even, saturated. Padding cells add +0.0, which leaves a float32 sum unchanged, so the taps run
over a zero-padded copy. A window covering the whole unpadded image takes the integer global path.
"""
import math

import numpy as np

from rtd.errors import Code, RtdError

from ._contrib import QLinearKernel, global_average_8bit
from ._quant import eight_bit, quantize
from ._window import geometry, pad_into, separable, taps
from .base import REQUIRED


def _ints(value, count, least, name):
    """`value` as a list of `count` ints ≥ least; E_MODEL_INVALID naming the attribute otherwise."""
    if (not isinstance(value, (list, tuple)) or len(value) != count
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= least for v in value)):
        raise RtdError(Code.E_MODEL_INVALID,
                       f"QLinearAveragePool: attribute {name}={value!r} is not {count} integers ≥ {least}")
    return list(value)


class QLinearAveragePool_1(QLinearKernel):
    attributes = {"auto_pad": "NOTSET", "ceil_mode": 0, "channels_last": 0, "count_include_pad": 0,
                  "kernel_shape": REQUIRED, "pads": None, "strides": None}

    def setup(self):
        nd = len(self.kernel_shape) if isinstance(self.kernel_shape, (list, tuple)) else 0
        if not 1 <= nd <= 3:
            raise RtdError(Code.E_MODEL_INVALID,
                           f"QLinearAveragePool: attribute kernel_shape={self.kernel_shape!r} must have 1 to 3 dims")
        self.kernel_shape = _ints(self.kernel_shape, nd, 1, "kernel_shape")
        self.strides = _ints(self.strides, nd, 1, "strides") if self.strides is not None else [1] * nd
        self.pads = _ints(self.pads, 2 * nd, 0, "pads") if self.pads is not None else [0] * 2 * nd
        if self.auto_pad not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
            raise RtdError(Code.E_MODEL_INVALID, f"QLinearAveragePool: attribute auto_pad={self.auto_pad!r} is not "
                           "NOTSET, SAME_UPPER, SAME_LOWER or VALID")
        for name in ("ceil_mode", "channels_last", "count_include_pad"):
            if getattr(self, name) not in (0, 1):
                raise RtdError(Code.E_MODEL_INVALID, f"QLinearAveragePool: attribute {name}={getattr(self, name)!r} is not 0 or 1")

    def run(self, x, x_scale, x_zero_point, y_scale, y_zero_point=None):
        xp, nd = self.xp, len(self.kernel_shape)
        dtype = eight_bit(self.op_type, x)
        if x.ndim != nd + 2:
            raise RtdError(Code.E_INPUT_INVALID, f"QLinearAveragePool: input of rank {x.ndim} for a {nd}-D kernel")
        params = self.params(dtype, x_scale, x_zero_point, y_scale, y_zero_point)
        if self.channels_last:
            x = xp.moveaxis(x, -1, 1)
        spatial = x.shape[2:]
        out_shape, begin, end = geometry(spatial, self.kernel_shape, self.strides, None, self.pads, self.auto_pad,
                                         self.ceil_mode)
        if list(spatial) == self.kernel_shape and not any(begin) and not any(end):
            y = global_average_8bit(xp, x, params, dtype, False)
        else:
            y = self._windowed(x, params, dtype, out_shape, begin, end)
        return (xp.moveaxis(y, 1, -1) if self.channels_last else y,)

    def _windowed(self, x, params, dtype, out_shape, begin, end):
        xp = self.xp
        x_scale, x_zp, y_scale, y_zp = params
        values = xp.subtract(x, x_zp, dtype=np.float32)
        values *= x_scale
        padded = pad_into(values, begin, end, 0, "qlinear-avgpool", xp)
        y = None
        for _, view in taps(padded, self.kernel_shape, self.strides, None, out_shape):
            y = view.copy() if y is None else xp.add(y, view, out=y)
        if self.count_include_pad:
            y /= np.float32(math.prod(self.kernel_shape))
        else:
            mask = np.zeros((1, 1) + padded.shape[2:], np.float32)
            mask[(0, 0) + tuple(slice(b, b + s) for b, s in zip(begin, x.shape[2:]))] = 1
            y /= xp.asarray(separable(np, mask, self.kernel_shape, self.strides, None, out_shape, np.add))
        y /= y_scale
        y += np.float32(y_zp)
        return quantize(xp, y, None, dtype)
