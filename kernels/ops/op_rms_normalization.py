"""RMSNormalization: x / sqrt(mean(x^2 over [axis, rank)) + eps) * scale."""
import numpy as np

from ._norm import stash_type
from .base import Kernel


class RMSNormalization_23(Kernel):
    attributes = {"axis": -1, "epsilon": 1e-5, "stash_type": 1}

    def run(self, x, scale):
        xp = self.xp
        axes = tuple(range(self.axis % x.ndim, x.ndim))
        xs = x.astype(np.result_type(x.dtype, stash_type(self.stash_type)), copy=False)
        ms = xp.square(xs).mean(axis=axes, keepdims=True)
        ms += ms.dtype.type(self.epsilon)
        y = xs / xp.sqrt(ms)
        y *= scale
        return (y.astype(x.dtype, copy=False),)
