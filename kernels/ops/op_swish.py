"""Swish: x * sigmoid(alpha * x)."""
from scipy import special

from .base import Elementwise


class Swish_24(Elementwise):
    attributes = {"alpha": 1.0}

    @property
    def cuda(self):
        return f"in0 / (1 + exp(-({self.alpha!r}) * in0))"

    def compute(self, x, out=None):
        gate = self.xp.multiply(x, self.alpha)
        special.expit(gate, out=gate)
        return self.xp.multiply(x, gate, out=out)
