"""ArgExtreme: the shared base of ArgMax and ArgMin (first or last index of the extreme)."""
import numpy as np

from ._axes import normalize_axis
from .base import Kernel


class ArgExtreme(Kernel):
    """`pick` names the xp function ("argmax" / "argmin"); indices come back as int64."""

    attributes = {"axis": 0, "keepdims": 1, "select_last_index": 0}
    pick: str

    def run(self, x):
        xp = self.xp
        axis = normalize_axis(self.axis, x.ndim, self.op_type)
        pick = getattr(xp, self.pick)
        keepdims = bool(self.keepdims)
        if self.select_last_index:  # the first hit in the reversed axis is the last one
            index = pick(xp.flip(x, axis), axis=axis, keepdims=keepdims)
            index = (x.shape[axis] - 1) - index
        else:
            index = pick(x, axis=axis, keepdims=keepdims)
        return (index.astype(np.int64, copy=False),)
