"""Hardmax: 1 at the first maximum along an axis, 0 elsewhere."""
from ._softmax import AlongAxis, Coerced2D


class Hardmax_13(AlongAxis):
    def along(self, x, axis):
        xp = self.xp
        result = xp.zeros_like(x)
        if x.size:
            xp.put_along_axis(result, xp.argmax(x, axis=axis, keepdims=True), 1, axis=axis)
        return result


class Hardmax_1(Coerced2D, Hardmax_13):
    pass
