"""Softmax: exp(x - max) / sum(exp(x - max)) along an axis.

Rows are processed in L2-sized blocks along a contiguous last axis (the attention case); the
per-row max shift is skipped when exp provably cannot overflow (`exp_is_safe`).
"""
import functools

from ._reduce import sum_over
from ._softmax import AlongAxis, Coerced2D, by_row_blocks, exp_is_safe


class Softmax_13(AlongAxis):
    def along(self, x, axis):
        rows = functools.partial(self._rows, shift=not exp_is_safe(self.xp, x, axis))
        return by_row_blocks(self.xp, rows, x, axis)

    def _rows(self, x, out, axis, shift):
        xp = self.xp
        if shift:
            xp.subtract(x, xp.max(x, axis=axis, keepdims=True), out=out)
            xp.exp(out, out=out)
        else:
            xp.exp(x, out=out)
        out *= xp.reciprocal(sum_over(xp, out, (axis,), keepdims=True))  # broadcast divide is slower


class Softmax_1(Coerced2D, Softmax_13):
    pass
