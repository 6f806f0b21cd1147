"""HardSigmoid: max(0, min(1, alpha * x + beta))."""
from .base import Elementwise


class HardSigmoid_6(Elementwise):
    attributes = {"alpha": 0.2, "beta": 0.5}

    @property
    def cuda(self):
        return f"fmin(fmax({self.alpha!r} * in0 + {self.beta!r}, 0.0), 1.0)"

    def compute(self, x, out=None):
        result = self.xp.multiply(x, x.dtype.type(self.alpha), out=out)  # typed: bfloat16 * float is float32
        result += self.beta
        return self.xp.clip(result, 0, 1, out=result)
