"""ReduceSum: the sum over the given axes (axes as an input from opset 13)."""
from ._reduce import AxesFromAttribute, AxesFromInput, sum_over


class ReduceSum_13(AxesFromInput):
    def reduce(self, x, axes, keepdims):
        return sum_over(self.xp, x, axes, keepdims)


class ReduceSum_1(AxesFromAttribute, ReduceSum_13):
    pass
