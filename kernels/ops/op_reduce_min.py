"""ReduceMin: the minimum over the given axes (axes as an input from opset 18); NaN propagates,
an empty reduction gives the type's highest value (+inf for floats)."""
from ._reduce import AxesFromAttribute, AxesFromInput, highest, reduces_empty


class ReduceMin_18(AxesFromInput):
    def reduce(self, x, axes, keepdims):
        if reduces_empty(x, axes):
            return self.xp.min(x, axis=axes, keepdims=keepdims, initial=highest(x.dtype))
        return self.xp.min(x, axis=axes, keepdims=keepdims)


class ReduceMin_1(AxesFromAttribute, ReduceMin_18):
    pass
