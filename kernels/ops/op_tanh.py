"""Tanh: hyperbolic tangent of each element; float32 by the compiled activations (native/activation.py)."""
import numpy as np

from ..native.activation import TANH, activation
from ._ufunc import Ufunc


class Tanh_6(Ufunc):
    ufunc, cuda = "tanh", "tanh(in0)"

    def compute(self, x, out=None):
        if self.xp is np and (y := activation(TANH, x, out)) is not None:
            return y
        return self._ufunc(x, out=out)
