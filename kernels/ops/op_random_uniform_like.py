"""RandomUniformLike: uniform samples from [low, high) shaped like the input (its dtype unless `dtype`)."""
from ._random import dtype_of, generator
from .base import Kernel


class RandomUniformLike_1(Kernel):
    on_device = False   # drawn on the host (kernels/ops/_random.py)
    attributes = {"dtype": None, "high": 1.0, "low": 0.0, "seed": None}

    def run(self, like):
        values = generator(self.seed).uniform(self.low, self.high, like.shape)
        return (self.xp.asarray(values.astype(dtype_of(self.dtype, like))),)
