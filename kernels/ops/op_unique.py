"""Unique: distinct values (or slices along `axis`) with first indices, inverse indices and counts.

With sorted=0 the uniques keep the order of their first occurrence.
"""
from ._axes import normalize_axis
from .base import Kernel


class Unique_11(Kernel):
    attributes = {"axis": None, "sorted": 1}

    def run(self, x):
        xp = self.xp
        axis = None if self.axis is None else normalize_axis(self.axis, x.ndim, "Unique")
        values, first, inverse, counts = xp.unique(
            x.reshape(-1) if axis is None else x, return_index=True, return_inverse=True, return_counts=True, axis=axis)
        inverse = inverse.reshape(-1)
        if not self.sorted:
            order = xp.argsort(first, kind="stable")
            rank = xp.empty_like(order)
            rank[order] = xp.arange(order.size)
            values = xp.take(values, order, axis=0 if axis is None else axis)
            first, counts, inverse = first[order], counts[order], rank[inverse]
        return values, first.astype(xp.int64), inverse.astype(xp.int64), counts.astype(xp.int64)
