"""RandomNormal: a tensor of the `shape` attribute drawn from N(mean, scale^2)."""
from ._random import dtype_of, generator
from .base import REQUIRED, Kernel


class RandomNormal_1(Kernel):
    on_device = False   # drawn on the host (kernels/ops/_random.py)
    attributes = {"dtype": 1, "mean": 0.0, "scale": 1.0, "seed": None, "shape": REQUIRED}

    def run(self):
        values = generator(self.seed).normal(self.mean, self.scale, tuple(self.shape))
        return (self.xp.asarray(values.astype(dtype_of(self.dtype))),)
