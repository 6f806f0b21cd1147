"""The shared bases of Softmax, LogSoftmax and Hardmax: which axis they normalize along.

Before opset 13 the input is coerced to 2-D at `axis` ([prod(shape[:axis]), prod(shape[axis:])])
and normalized along that second dimension; from 13 on it is normalized along `axis` alone.
An op file defines `along(x, axis)` once on its `AlongAxis` class and derives the old version:
`class Softmax_13(AlongAxis)` and `class Softmax_1(Coerced2D, Softmax_13)`.
"""
import math

import numpy as np

from ..native.activation import softmax_rows
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


def exp_cannot_overflow(xp, x, axis) -> bool:
    """True when exp(x) summed along `axis` stays finite everywhere (one contiguous max pass).

    The row-maximum shift guards exp against overflow and rows that underflow entirely. The
    first is ruled out here for the whole array at once; the second shows afterwards as a row
    sum below `_NORMAL_SUM`, and only then is the shift paid (a per-row max and a broadcast
    subtract: about 3x the cost of the rest of a 128-wide softmax).
    """
    if x.size and x.dtype.kind == "f":
        top = math.log(np.finfo(x.dtype).max) - math.log(x.shape[axis]) - 1
        return float(xp.max(x)) < top  # NaN fails
    return False


def _normal_sum(dtype) -> float:
    """A row sum at least this large has its largest exp term (>= sum / 2**40) in the normal
    range, so exp(x) / sum(exp(x)) keeps full precision without the shift."""
    return float(np.finfo(dtype).tiny) * 2.0 ** 80


def softmax(xp, x, axis, out=None):
    """exp(x) / sum(exp(x)) along `axis` into `out` (new if None; may be x): the Softmax op's
    kernel and the fused Softmax/Attention steps' one implementation."""
    if xp is np and axis == x.ndim - 1 and (y := softmax_rows(x, out)) is not None:   # float32: compiled, one pass per row
        return y
    half = x.dtype.itemsize < 4  # half precision: shift always, and divide (a reciprocal's extra rounding shows)
    # the unshifted try reads a max and a min back to the host: a sync on a GPU, where the
    # shifted form is memory-bound either way, so only the CPU tries it
    try_unshifted = xp is np and not half and exp_cannot_overflow(xp, x, axis)
    in_place = out is x

    def rows(part, out_part, axis):
        if try_unshifted:
            source = part.copy() if in_place else part  # kept in case a row underflows entirely
            xp.exp(part, out=out_part)
            total = sum_over(xp, out_part, (axis,), keepdims=True)
            if float(total.min()) >= _normal_sum(x.dtype):
                out_part *= xp.reciprocal(total)  # broadcast divide is slower
                return
            part = source
        xp.subtract(part, xp.max(part, axis=axis, keepdims=True), out=out_part)
        xp.exp(out_part, out=out_part)
        total = sum_over(xp, out_part, (axis,), keepdims=True)
        if half:
            out_part /= total
        else:
            out_part *= xp.reciprocal(total)

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
