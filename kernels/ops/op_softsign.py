"""Softsign: x / (1 + |x|)."""
from .base import Elementwise


class Softsign_1(Elementwise):
    cuda = "in0 / (1 + fabs(in0))"

    def compute(self, x, out=None):
        denominator = self.xp.absolute(x)
        denominator += 1
        return self.xp.divide(x, denominator, out=out)
