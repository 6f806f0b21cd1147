"""GatherElements: out[i][j] = x[index[i][j]][j] along `axis` (numpy's take_along_axis)."""
from ._axes import normalize_axis, wrap_indices
from .base import Kernel


class GatherElements_11(Kernel):
    attributes = {"axis": 0}

    def run(self, x, indices):
        axis = normalize_axis(self.axis, x.ndim, "GatherElements")
        indices = wrap_indices(self.xp, indices, x.shape[axis], "GatherElements")
        return (self.xp.take_along_axis(x, indices, axis=axis),)
