"""ReduceLogSum: log of the sum over the given axes (axes as an input from opset 18)."""
from ._reduce import AxesFromAttribute, AxesFromInput, in_type_of


class ReduceLogSum_18(AxesFromInput):
    def reduce(self, x, axes, keepdims):
        total = self.xp.sum(x, axis=axes, keepdims=keepdims, dtype=x.dtype)
        return in_type_of(x, self.xp.log(total))


class ReduceLogSum_1(AxesFromAttribute, ReduceLogSum_18):
    pass
