"""OneHot: a new axis of length `depth` holding on_value at each index, off_value elsewhere.

Negative indices count from depth; indices outside [-depth, depth) give an all-off row.
"""
from ._axes import normalize_axis
from .base import Kernel


class OneHot_9(Kernel):
    attributes = {"axis": -1}

    def run(self, indices, depth, values):
        xp = self.xp
        depth = int(self.host(xp.asarray(depth)).reshape(-1)[0])
        axis = normalize_axis(self.axis, indices.ndim + 1, "OneHot")
        idx = indices.astype(xp.int64)
        idx = xp.where(idx < 0, idx + depth, idx)
        classes = xp.arange(depth).reshape((depth,) + (1,) * (indices.ndim - axis))
        hot = xp.expand_dims(idx, axis) == classes
        return (xp.where(hot, values[1], values[0]).astype(values.dtype),)
