"""ReduceMean: the mean over the given axes (axes as an input from opset 18)."""
from ._reduce import AxesFromAttribute, AxesFromInput, in_type_of


class ReduceMean_18(AxesFromInput):
    def reduce(self, x, axes, keepdims):
        return in_type_of(x, self.xp.mean(x, axis=axes, keepdims=keepdims))


class ReduceMean_1(AxesFromAttribute, ReduceMean_18):
    pass
