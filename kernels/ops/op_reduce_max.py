"""ReduceMax: the maximum over the given axes (axes as an input from opset 18); NaN propagates,
an empty reduction gives the type's lowest value (-inf for floats)."""
from ._reduce import AxesFromAttribute, AxesFromInput, lowest, reduces_empty


class ReduceMax_18(AxesFromInput):
    def reduce(self, x, axes, keepdims):
        if reduces_empty(x, axes):
            return self.xp.max(x, axis=axes, keepdims=keepdims, initial=lowest(x.dtype))
        return self.xp.max(x, axis=axes, keepdims=keepdims)


class ReduceMax_1(AxesFromAttribute, ReduceMax_18):
    pass
