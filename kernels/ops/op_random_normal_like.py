"""RandomNormalLike: N(mean, scale^2) samples shaped like the input (its dtype unless `dtype`)."""
from ._random import dtype_of, generator
from .base import Kernel


class RandomNormalLike_1(Kernel):
    on_device = False   # drawn on the host (kernels/ops/_random.py)
    attributes = {"dtype": None, "mean": 0.0, "scale": 1.0, "seed": None}

    def run(self, like):
        values = generator(self.seed).normal(self.mean, self.scale, like.shape)
        return (self.xp.asarray(values.astype(dtype_of(self.dtype, like))),)
