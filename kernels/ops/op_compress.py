"""Compress: keep the slices along `axis` (of the flattened input without one) where condition holds."""
from ._axes import normalize_axis
from .base import Kernel


class Compress_9(Kernel):
    attributes = {"axis": None}

    def run(self, x, condition):
        condition = condition.astype(bool)
        if self.axis is None:
            return (self.xp.compress(condition, x.reshape(-1)),)
        return (self.xp.compress(condition, x, axis=normalize_axis(self.axis, x.ndim, "Compress")),)
