"""LayerNormalization: standardize over axes [axis, rank), then scale and bias; optional Mean and InvStdDev."""
import numpy as np

from ._norm import compiled_layernorm, standardize, stash_type
from .base import Kernel


class LayerNormalization_17(Kernel):
    attributes = {"axis": -1, "epsilon": 1e-5, "stash_type": 1}

    def run(self, x, scale, bias=None):
        axis = self.axis % x.ndim
        axes = tuple(range(axis, x.ndim))
        if self.xp is np and axis == x.ndim - 1 and stash_type(self.stash_type) == np.float32:
            y = compiled_layernorm(x, scale, bias, self.epsilon)   # the fused LayerNorm's rows, bit for bit
            if y is not None:
                _, mean, inv_std = standardize(self.xp, x, axes, self.epsilon, np.float32)
                return y, mean, inv_std
        y, mean, inv_std = standardize(self.xp, x, axes, self.epsilon, stash_type(self.stash_type))
        y *= scale
        if bias is not None:
            y += bias
        return y.astype(x.dtype, copy=False), mean, inv_std
