"""LayerNormalization: standardize over axes [axis, rank), then scale and bias; optional Mean and InvStdDev."""
from ._norm import standardize, stash_type
from .base import Kernel


class LayerNormalization_17(Kernel):
    attributes = {"axis": -1, "epsilon": 1e-5, "stash_type": 1}

    def run(self, x, scale, bias=None):
        axis = self.axis % x.ndim
        axes = tuple(range(axis, x.ndim))
        y, mean, inv_std = standardize(self.xp, x, axes, self.epsilon, stash_type(self.stash_type))
        y *= scale
        if bias is not None:
            y += bias
        return y.astype(x.dtype, copy=False), mean, inv_std
