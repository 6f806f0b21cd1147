"""LeakyRelu: x where x >= 0, alpha * x elsewhere."""
from .base import Elementwise


class LeakyRelu_6(Elementwise):
    attributes = {"alpha": 0.01}

    @property
    def cuda(self):
        return f"in0 >= 0 ? in0 : {self.alpha!r} * in0"

    def compute(self, x, out=None):
        # For alpha <= 1 the larger of x and alpha*x is the answer on both sides of 0 (the
        # smaller for alpha > 1): one temporary, no mask.
        pick = self.xp.maximum if self.alpha <= 1 else self.xp.minimum
        return pick(x, self.xp.multiply(x, x.dtype.type(self.alpha)), out=out)  # typed: keeps bfloat16
