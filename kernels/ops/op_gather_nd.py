"""GatherND: index the data by the last axis of `indices` after `batch_dims` shared batch axes."""
import math

from ._axes import wrap_indices
from .base import Kernel


def gather_nd(xp, data, indices, batch_dims: int):
    batch = data.shape[:batch_dims]
    depth = indices.shape[-1]
    flat_data = data.reshape(math.prod(batch), *data.shape[batch_dims:])
    flat_idx = indices.reshape(math.prod(batch), -1, depth)
    coords = [wrap_indices(xp, flat_idx[..., i], flat_data.shape[1 + i], "GatherND") for i in range(depth)]
    rows = xp.arange(flat_data.shape[0]).reshape(-1, 1)
    picked = flat_data[(rows, *coords)]
    return picked.reshape(indices.shape[:-1] + data.shape[batch_dims + depth:])


class GatherND_11(Kernel):
    def run(self, data, indices):
        return (gather_nd(self.xp, data, indices, 0),)


class GatherND_12(Kernel):
    attributes = {"batch_dims": 0}

    def run(self, data, indices):
        return (gather_nd(self.xp, data, indices, self.batch_dims),)
