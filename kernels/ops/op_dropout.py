"""Dropout: identity plus an all-true mask at inference; with training_mode (opset 12) a seeded mask.

A given `seed` makes the mask reproducible (a fresh RandomState(seed) per run); without one
each run draws from fresh OS entropy.
"""
import numpy as np

from .base import Kernel


class Dropout_7(Kernel):
    attributes = {"ratio": 0.5}

    def run(self, x):
        return x, self.xp.ones(x.shape, dtype=bool)


class Dropout_12(Kernel):
    attributes = {"seed": None}

    def run(self, x, ratio=None, training_mode=None):
        xp = self.xp
        ratio = 0.5 if ratio is None else float(self.host(xp.asarray(ratio)).reshape(-1)[0])
        training = training_mode is not None and bool(self.host(xp.asarray(training_mode)).reshape(-1)[0])
        if not training or ratio == 0:
            return x, xp.ones(x.shape, dtype=bool)
        rng = np.random.RandomState(None if self.seed is None else int(self.seed))
        mask = xp.asarray(rng.uniform(0.0, 1.0, x.shape) >= ratio)
        return mask * x * (1.0 / (1.0 - ratio)), mask
