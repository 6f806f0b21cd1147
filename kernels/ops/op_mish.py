"""Mish: x * tanh(softplus(x))."""
from .base import Elementwise


class Mish_18(Elementwise):
    cuda = "in0 * tanh(in0 > 20 ? in0 : log1p(exp(in0)))"

    def compute(self, x, out=None):
        gate = self.xp.logaddexp(x, 0)
        self.xp.tanh(gate, out=gate)
        return self.xp.multiply(x, gate, out=out)
