"""ReduceProd: the product over the given axes (axes as an input from opset 18)."""
from ._reduce import AxesFromAttribute, AxesFromInput


class ReduceProd_18(AxesFromInput):
    def reduce(self, x, axes, keepdims):
        return self.xp.prod(x, axis=axes, keepdims=keepdims, dtype=x.dtype)


class ReduceProd_1(AxesFromAttribute, ReduceProd_18):
    pass
