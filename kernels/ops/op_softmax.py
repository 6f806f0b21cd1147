"""Softmax: exp(x - max) / sum(exp(x - max)) along an axis.

Along a contiguous last axis (the attention case) rows are processed in L2-sized blocks, so
exp, row sum and scaling each touch memory once; the per-row max shift is skipped when exp
provably cannot overflow (`exp_is_safe`).
"""
import numpy as np

from ._blocked import BLOCK
from ._reduce import sum_over
from ._softmax import AlongAxis, Coerced2D, exp_is_safe


class Softmax_13(AlongAxis):
    def along(self, x, axis):
        xp = self.xp
        shift = not exp_is_safe(xp, x, axis)
        if xp is np and axis == x.ndim - 1 and x.flags.c_contiguous and x.size > BLOCK:
            result = np.empty_like(x)
            rows, out = x.reshape(-1, x.shape[-1]), result.reshape(-1, x.shape[-1])
            step = max(1, BLOCK // x.shape[-1])
            for start in range(0, len(rows), step):
                self._rows(rows[start:start + step], out[start:start + step], 1, shift)
            return result
        return self._rows(x, xp.empty_like(x), axis, shift)

    def _rows(self, x, out, axis, shift):
        xp = self.xp
        if shift:
            xp.subtract(x, xp.max(x, axis=axis, keepdims=True), out=out)
            xp.exp(out, out=out)
        else:
            xp.exp(x, out=out)
        scale = xp.reciprocal(sum_over(xp, out, (axis,), keepdims=True))
        out *= scale  # a multiply by the per-row reciprocal: a broadcast divide is slower
        return out


class Softmax_1(Coerced2D, Softmax_13):
    pass
