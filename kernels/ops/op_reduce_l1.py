"""ReduceL1: the sum of absolute values over the given axes (axes as an input from opset 18)."""
from ._reduce import AxesFromAttribute, AxesFromInput


class ReduceL1_18(AxesFromInput):
    def reduce(self, x, axes, keepdims):
        return self.xp.sum(self.xp.absolute(x), axis=axes, keepdims=keepdims, dtype=x.dtype)


class ReduceL1_1(AxesFromAttribute, ReduceL1_18):
    pass
