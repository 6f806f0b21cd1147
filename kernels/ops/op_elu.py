"""Elu: x where x > 0, alpha * (exp(x) - 1) elsewhere."""
from .base import Elementwise


class Elu_6(Elementwise):
    attributes = {"alpha": 1.0}

    @property
    def cuda(self):
        return f"in0 > 0 ? in0 : {self.alpha!r} * expm1(in0)"

    def compute(self, x, out=None):
        positive = self.xp.maximum(x, 0)  # taken first: `out` may alias `x`
        result = self.xp.minimum(x, 0, out=out)
        self.xp.expm1(result, out=result)
        result *= self.alpha
        result += positive
        return result
