"""Celu: max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""
from .base import Elementwise


class Celu_12(Elementwise):
    attributes = {"alpha": 1.0}

    @property
    def cuda(self):
        return f"in0 > 0 ? in0 : {self.alpha!r} * expm1(in0 / {self.alpha!r})"

    def compute(self, x, out=None):
        positive = self.xp.maximum(x, 0)  # taken first: `out` may alias `x`
        result = self.xp.minimum(x, 0, out=out)
        result /= self.alpha
        self.xp.expm1(result, out=result)
        result *= self.alpha
        result += positive
        return result
