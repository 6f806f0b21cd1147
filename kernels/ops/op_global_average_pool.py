"""GlobalAveragePool: mean over every spatial axis, kept as size-1 axes.

A float input is summed per (n, c) plane by `sum_over` (float32: the compiled pairwise sum a native
program's REDUCE runs too; float64: einsum's straight loop up to EINSUM_MAX_ROW, where `mean` over trailing
axes pays a reduction set-up that dominates small CNN heads) and divided by the plane's size.
"""
import math

import numpy as np

from ._reduce import sum_over
from .base import Kernel


class GlobalAveragePool_1(Kernel):
    def run(self, x):
        plane = math.prod(x.shape[2:])
        if x.ndim > 2 and plane > 0 and x.dtype in (np.float32, np.float64):
            total = self.xp.asarray(sum_over(self.xp, x.reshape(x.shape[0], x.shape[1], plane), (2,), keepdims=False))
            total /= total.dtype.type(plane)
            return (total.reshape(x.shape[:2] + (1,) * (x.ndim - 2)),)
        return (x.mean(axis=tuple(range(2, x.ndim)), keepdims=True),)
