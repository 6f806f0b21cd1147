"""Multinomial: `sample_size` class indices per batch row, drawn from unnormalized log-probabilities."""
import numpy as np

from ._random import dtype_of, generator
from .base import Kernel


class Multinomial_7(Kernel):
    on_device = False   # drawn on the host (kernels/ops/_random.py)
    attributes = {"dtype": 6, "sample_size": 1, "seed": None}

    def run(self, logits):
        scores = self.host(logits).astype(np.float64)
        probs = np.exp(scores - scores.max(axis=1, keepdims=True))
        cumulative = np.cumsum(probs / probs.sum(axis=1, keepdims=True), axis=1)
        draws = generator(self.seed).random((scores.shape[0], self.sample_size))
        # Inverse-CDF sampling, vectorized over the batch: count the classes each draw passes.
        samples = (draws[:, :, None] >= cumulative[:, None, :-1]).sum(axis=2)
        return (self.xp.asarray(samples.astype(dtype_of(self.dtype))),)
