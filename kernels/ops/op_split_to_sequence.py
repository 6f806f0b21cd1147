"""SplitToSequence: split along `axis` into a sequence: by sizes, by a chunk length, or into ones."""
import numpy as np

from rtd.errors import Code, RtdError

from ._axes import normalize_axis
from .base import Kernel


class SplitToSequence_11(Kernel):
    attributes = {"axis": 0, "keepdims": 1}

    def run(self, x, split=None):
        xp = self.xp
        axis = normalize_axis(self.axis, x.ndim, "SplitToSequence")
        dim = x.shape[axis]
        if split is None:
            parts = xp.split(x, dim, axis=axis)
            return ([xp.squeeze(p, axis=axis) for p in parts] if not self.keepdims else parts,)
        sizes = self.host(xp.asarray(split)).astype(np.int64)
        if sizes.ndim == 0:
            sizes = np.full(-(-dim // int(sizes)), int(sizes))
            sizes[-1] = dim - int(sizes[:-1].sum())
        if sizes.sum() != dim or (sizes < 0).any():
            raise RtdError(Code.E_INPUT_INVALID, f"SplitToSequence: sizes {sizes.tolist()} for a dimension of {dim}")
        return (xp.split(x, np.cumsum(sizes)[:-1].tolist(), axis=axis),)
