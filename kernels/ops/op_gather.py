"""Gather: pick slices along `axis` by index (negative indices count from the end).

`xp.take` is one vectorized copy, which is what an embedding lookup needs.
"""
from rtd.errors import Code, RtdError

from ._axes import normalize_axis
from .base import Kernel


class Gather_1(Kernel):
    attributes = {"axis": 0}

    def run(self, x, indices):
        axis = normalize_axis(self.axis, x.ndim, "Gather")
        try:
            return (self.xp.take(x, indices, axis=axis),)
        except IndexError:
            raise RtdError(Code.E_INPUT_INVALID, f"Gather: index out of range for a dimension of {x.shape[axis]}") from None
