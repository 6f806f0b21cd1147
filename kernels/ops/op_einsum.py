"""Einsum: the equation evaluated by xp.einsum with contraction-order optimization."""
from .base import REQUIRED, Kernel


class Einsum_12(Kernel):
    attributes = {"equation": REQUIRED}

    def setup(self):
        self.subscripts = self.equation.replace(" ", "")

    def run(self, *inputs):
        dtype = inputs[0].dtype
        if dtype.kind == "V":  # ml_dtypes (bfloat16) have no einsum loops: compute in float32
            inputs = [x.astype(self.xp.float32) for x in inputs]
        return (self.xp.einsum(self.subscripts, *inputs, optimize=len(inputs) > 2).astype(dtype, copy=False),)
