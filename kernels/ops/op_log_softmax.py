"""LogSoftmax: (x - max) - log(sum(exp(x - max))) along an axis.

Always shifted by the row maximum (unlike Softmax): x - log(sum(exp(x))) would cancel to
ulp(|x|) for the dominant entries, where x - max is exactly 0.
"""
from ._softmax import AlongAxis, Coerced2D


class LogSoftmax_13(AlongAxis):
    def along(self, x, axis):
        xp = self.xp
        result = xp.subtract(x, xp.max(x, axis=axis, keepdims=True))
        total = xp.sum(xp.exp(result), axis=axis, keepdims=True)
        result -= xp.log(total, out=total)
        return result


class LogSoftmax_1(Coerced2D, LogSoftmax_13):
    pass
