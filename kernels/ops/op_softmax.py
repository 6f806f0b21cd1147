"""Softmax: exp(x - max) / sum(exp(x - max)) along an axis, in one output buffer."""
from ._reduce import sum_over
from ._softmax import AlongAxis, Coerced2D, exp_shift


class Softmax_13(AlongAxis):
    def along(self, x, axis):
        xp = self.xp
        shift = exp_shift(xp, x, axis)
        result = xp.exp(x) if shift is None else xp.exp(xp.subtract(x, shift))
        scale = xp.reciprocal(sum_over(xp, result, (axis,), keepdims=True))
        result *= scale  # a multiply by the per-row reciprocal: broadcast divide is slower
        return result


class Softmax_1(Coerced2D, Softmax_13):
    pass
