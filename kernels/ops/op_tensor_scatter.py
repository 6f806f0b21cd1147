"""TensorScatter: a KV cache written functionally: `update` (the cache's shape but for
sequence_length along `axis`) lands at write_indices[b] onwards (default 0) of each batch row of
a copy of `past_cache`; mode "circular" wraps the positions modulo the cache's length, "linear"
must fit. One advanced-index assignment writes every row."""
import numpy as np

from rtd.errors import Code, RtdError

from ._axes import normalize_axis
from .base import Kernel


class TensorScatter_24(Kernel):
    attributes = {"axis": -2, "mode": "linear"}

    def setup(self):
        if self.mode not in ("linear", "circular"):
            raise RtdError(Code.E_MODEL_INVALID, f"TensorScatter: mode {self.mode!r} is not linear or circular")

    def run(self, past, update, write_indices=None):
        xp = self.xp
        axis = normalize_axis(self.axis, past.ndim, "TensorScatter")
        if axis == 0:
            raise RtdError(Code.E_MODEL_INVALID, "TensorScatter: axis 0 is the batch axis")
        size, length = past.shape[axis], update.shape[axis] if update.ndim == past.ndim else -1
        if update.ndim != past.ndim or any(u != p for d, (u, p) in enumerate(zip(update.shape, past.shape)) if d != axis) \
                or length > size:
            raise RtdError(Code.E_INPUT_INVALID, f"TensorScatter: update {list(update.shape)} for a cache {list(past.shape)} on axis {axis}")
        batch = past.shape[0]
        starts = np.zeros(batch, np.int64) if write_indices is None else self.host(write_indices).astype(np.int64).reshape(-1)
        if starts.shape != (batch,) or (starts.size and starts.min() < 0) or \
                (self.mode == "linear" and starts.size and starts.max() + length > size):
            raise RtdError(Code.E_INPUT_INVALID, f"TensorScatter: write_indices {starts.tolist()[:8]} for {length} of {size} positions")
        present = past.copy()
        if length == 0 or batch == 0:
            return (present,)
        positions = starts[:, None] + np.arange(length)
        if self.mode == "circular":
            positions %= size
        index = [xp.arange(n).reshape([n if d == k else 1 for k in range(past.ndim)]) for d, n in enumerate(update.shape)]
        index[axis] = xp.asarray(positions.reshape([batch] + [length if k == axis else 1 for k in range(1, past.ndim)]))
        present[tuple(index)] = update
        return (present,)
