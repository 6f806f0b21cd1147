"""ReduceSum: the sum over the given axes (axes as an input from opset 13)."""
from ._reduce import AxesFromAttribute, AxesFromInput


class ReduceSum_13(AxesFromInput):
    def reduce(self, x, axes, keepdims):
        return self.xp.sum(x, axis=axes, keepdims=keepdims, dtype=x.dtype)


class ReduceSum_1(AxesFromAttribute, ReduceSum_13):
    pass
