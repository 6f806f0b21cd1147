"""Shape: the input's dimensions as int64; from opset 15 a [start:end) slice of them."""
import numpy as np

from .base import Kernel


class Shape_1(Kernel):
    def run(self, x):
        return (self.xp.asarray(np.array(x.shape, dtype=np.int64)),)


class Shape_15(Kernel):
    attributes = {"start": 0, "end": None}

    def run(self, x):
        # Python slicing clamps exactly as the spec asks (negative counts from the back).
        return (self.xp.asarray(np.array(x.shape[self.start:self.end], dtype=np.int64)),)
