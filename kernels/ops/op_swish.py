"""Swish: x * sigmoid(alpha * x), blocked over cache-sized pieces for large NumPy arrays."""
import numpy as np

from ._blocked import blockable, in_blocks
from .base import Elementwise


class Swish_24(Elementwise):
    attributes = {"alpha": 1.0}

    @property
    def cuda(self):
        return f"in0 / (1 + exp(-({self.alpha!r}) * in0))"

    def compute(self, x, out=None):
        with np.errstate(over="ignore"):  # exp(-alpha x) = inf gives the right 0
            if blockable(self.xp, x, out):
                return in_blocks(self._swish, x, out)
            return self._swish(x, out)

    def _swish(self, x, out):
        xp = self.xp
        denominator = xp.multiply(x, x.dtype.type(-self.alpha))  # typed: bfloat16 * float is float32
        xp.exp(denominator, out=denominator)
        denominator += 1
        return xp.divide(x, denominator, out=out)
