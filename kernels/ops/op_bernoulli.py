"""Bernoulli: 1 with probability p (the input's element), else 0, in `dtype` (the input's by
default). A uniform draw u in [0, 1) gives 1 where u < p, so p <= 0 never and p >= 1 always."""
import numpy as np

from ._random import dtype_of, generator
from .base import Kernel


class Bernoulli_15(Kernel):
    on_device = False   # drawn on the host (kernels/ops/_random.py)
    attributes = {"dtype": None, "seed": None}

    def run(self, p):
        p = self.host(p)
        draws = generator(self.seed).random(p.shape) < p.astype(np.float64, copy=False)
        return (self.xp.asarray(draws.astype(dtype_of(self.dtype, p))),)
