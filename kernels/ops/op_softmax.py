"""Softmax: exp(x - max) / sum(exp(x - max)) along an axis.

Rows are processed in L2-sized blocks along a contiguous last axis (the attention case); the
per-row max shift is paid only when exp could overflow or a row underflows entirely (`softmax`).
"""
from ._softmax import AlongAxis, Coerced2D, softmax


class Softmax_13(AlongAxis):
    def along(self, x, axis):
        return softmax(self.xp, x, axis)


class Softmax_1(Coerced2D, Softmax_13):
    pass
