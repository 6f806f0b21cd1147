"""ReduceL2: the Euclidean norm over the given axes (axes as an input from opset 18)."""
from ._reduce import AxesFromAttribute, AxesFromInput, in_type_of


class ReduceL2_18(AxesFromInput):
    def reduce(self, x, axes, keepdims):
        squares = self.xp.multiply(x, x)
        total = self.xp.sum(squares, axis=axes, keepdims=keepdims, dtype=x.dtype)
        return in_type_of(x, self.xp.sqrt(total))


class ReduceL2_1(AxesFromAttribute, ReduceL2_18):
    pass
