"""Sigmoid: 1 / (1 + exp(-x)); float32 by the compiled activations (native/activation.py), other types
blocked over cache-sized pieces for large NumPy arrays."""
import numpy as np

from ..native.activation import SIGMOID, activation
from ._blocked import blockable, in_blocks
from .base import Elementwise


class Sigmoid_6(Elementwise):
    cuda = "1 / (1 + exp(-in0))"

    def compute(self, x, out=None):
        if self.xp is np and (y := activation(SIGMOID, x, out)) is not None:
            return y
        with np.errstate(over="ignore"):  # exp(-x) = inf for x < -88 gives the right 0
            if blockable(self.xp, x, out):
                return in_blocks(self._sigmoid, x, out)
            return self._sigmoid(x, out)

    def _sigmoid(self, x, out):
        xp = self.xp
        denominator = xp.negative(x)
        xp.exp(denominator, out=denominator)
        denominator += 1
        return xp.reciprocal(denominator, out=out)
