"""Softmax: exp(x - max) / sum(exp(x - max)) along an axis, in one output buffer."""
from ._softmax import AlongAxis, Coerced2D


class Softmax_13(AlongAxis):
    def along(self, x, axis):
        xp = self.xp
        result = xp.subtract(x, xp.max(x, axis=axis, keepdims=True))
        xp.exp(result, out=result)
        result /= xp.sum(result, axis=axis, keepdims=True)
        return result


class Softmax_1(Coerced2D, Softmax_13):
    pass
