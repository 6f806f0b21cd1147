"""Flatten to 2-D at `axis`: dims before it form the rows, the rest the columns (a view)."""
import math

from ._axes import normalize_axis
from .base import Kernel


class Flatten_1(Kernel):
    attributes = {"axis": 1}

    def run(self, x):
        axis = self.axis + x.ndim if self.axis < 0 else self.axis
        axis = normalize_axis(axis, x.ndim + 1, "Flatten")  # axis == rank is allowed
        return (x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:])),)
