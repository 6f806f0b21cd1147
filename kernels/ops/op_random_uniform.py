"""RandomUniform: a tensor of the `shape` attribute drawn uniformly from [low, high)."""
from ._random import dtype_of, generator
from .base import REQUIRED, Kernel


class RandomUniform_1(Kernel):
    on_device = False   # drawn on the host (kernels/ops/_random.py)
    attributes = {"dtype": 1, "high": 1.0, "low": 0.0, "seed": None, "shape": REQUIRED}

    def run(self):
        values = generator(self.seed).uniform(self.low, self.high, tuple(self.shape))
        return (self.xp.asarray(values.astype(dtype_of(self.dtype))),)
