"""ReduceSumSquare: the sum of squares over the given axes (axes as an input from opset 18)."""
from ._reduce import AxesFromAttribute, AxesFromInput


class ReduceSumSquare_18(AxesFromInput):
    def reduce(self, x, axes, keepdims):
        return self.xp.sum(self.xp.multiply(x, x), axis=axes, keepdims=keepdims, dtype=x.dtype)


class ReduceSumSquare_1(AxesFromAttribute, ReduceSumSquare_18):
    pass
