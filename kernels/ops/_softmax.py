"""The shared bases of Softmax, LogSoftmax and Hardmax: which axis they normalize along.

Before opset 13 the input is coerced to 2-D at `axis` ([prod(shape[:axis]), prod(shape[axis:])])
and normalized along that second dimension; from 13 on it is normalized along `axis` alone.
An op file defines `along(x, axis)` once on its `AlongAxis` class and derives the old version:
`class Softmax_13(AlongAxis)` and `class Softmax_1(Coerced2D, Softmax_13)`.
"""
import math

import numpy as np

from ._axes import normalize_axis
from ._blocked import BLOCK
from ._reduce import sum_over
from .base import Kernel


def by_row_blocks(xp, rows_fn, x, axis, out=None):
    """`rows_fn(x_part, out_part, axis)` over L2-sized blocks of rows when `axis` is the
    contiguous last one (each pass then stays in cache), else once over the whole array.
    The result goes into `out` when given (it may be x itself)."""
    result = xp.empty_like(x) if out is None else out
    if (xp is np and axis == x.ndim - 1 and x.flags.c_contiguous and result.flags.c_contiguous
            and x.size > BLOCK):
        rows, out = x.reshape(-1, x.shape[-1]), result.reshape(-1, x.shape[-1])
        step = max(1, BLOCK // x.shape[-1])
        for start in range(0, len(rows), step):
            rows_fn(rows[start:start + step], out[start:start + step], 1)
        return result
    rows_fn(x, result, axis)
    return result


def exp_is_safe(xp, x, axis) -> bool:
    """True when exp(x) needs no shift by the row maximum before a sum along `axis`.

    The shift only guards exp against overflow (and all-underflow rows). When the whole array
    lies where exp is finite and normal even summed over a row, exp(x) / sum(exp(x)) is exact
    to the same rounding, and two contiguous min/max passes are far cheaper than a per-row max.
    """
    if x.size and x.dtype.kind == "f":
        info = np.finfo(x.dtype)
        top = math.log(info.max) - math.log(x.shape[axis]) - 1
        bottom = math.log(info.tiny) + 8
        return bottom < float(xp.min(x)) and float(xp.max(x)) < top  # NaN fails both
    return False


def softmax(xp, x, axis, out=None):
    """exp(x) / sum(exp(x)) along `axis` into `out` (new if None; may be x): the Softmax op's
    kernel and the fused Softmax/Attention steps' one implementation."""
    half = x.dtype.itemsize < 4  # half precision: shift always, and divide (a reciprocal's extra rounding shows)
    shift = half or not exp_is_safe(xp, x, axis)

    def rows(part, out_part, axis):
        if shift:
            xp.subtract(part, xp.max(part, axis=axis, keepdims=True), out=out_part)
            xp.exp(out_part, out=out_part)
        else:
            xp.exp(part, out=out_part)
        total = sum_over(xp, out_part, (axis,), keepdims=True)
        if half:
            out_part /= total
        else:
            out_part *= xp.reciprocal(total)  # broadcast divide is slower

    return by_row_blocks(xp, rows, x, axis, out)


class AlongAxis(Kernel):
    attributes = {"axis": -1}

    def run(self, x):
        return (self.along(x, normalize_axis(self.axis, x.ndim, self.op_type)),)

    def along(self, x, axis):
        raise NotImplementedError


class Coerced2D(Kernel):
    attributes = {"axis": 1}

    def run(self, x):
        axis = normalize_axis(self.axis, x.ndim, self.op_type)
        rows = x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))
        return (self.along(rows, 1).reshape(x.shape),)
