"""LogSoftmax: (x - max) - log(sum(exp(x - max))) along an axis, in L2-sized row blocks.

Always shifted by the row maximum (unlike Softmax): x - log(sum(exp(x))) would cancel to
ulp(|x|) for the dominant entries, where x - max is exactly 0.
"""
from ._reduce import sum_over
from ._softmax import AlongAxis, Coerced2D, by_row_blocks


class LogSoftmax_13(AlongAxis):
    def along(self, x, axis):
        return by_row_blocks(self.xp, self._rows, x, axis)

    def _rows(self, x, out, axis):
        xp = self.xp
        xp.subtract(x, xp.max(x, axis=axis, keepdims=True), out=out)
        total = sum_over(xp, xp.exp(out), (axis,), keepdims=True)
        out -= xp.log(total, out=total)


class LogSoftmax_1(Coerced2D, LogSoftmax_13):
    pass
