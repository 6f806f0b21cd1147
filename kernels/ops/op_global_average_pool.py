"""GlobalAveragePool: mean over every spatial axis, kept as size-1 axes.

A contiguous float32/float64 input with planes up to EINSUM_MAX_ROW is summed per (n, c) plane by
`sum_over` (einsum's straight loop): `mean` over trailing axes pays a reduction set-up that
dominates small CNN heads.
"""
import math

import numpy as np

from ._reduce import EINSUM_MAX_ROW, sum_over
from .base import Kernel


class GlobalAveragePool_1(Kernel):
    def run(self, x):
        plane = math.prod(x.shape[2:])
        if x.ndim > 2 and 0 < plane <= EINSUM_MAX_ROW and x.dtype in (np.float32, np.float64) and x.flags.c_contiguous:
            total = sum_over(self.xp, x.reshape(x.shape[0], x.shape[1], plane), (2,), keepdims=False)
            total /= total.dtype.type(plane)
            return (total.reshape(x.shape[:2] + (1,) * (x.ndim - 2)),)
        return (x.mean(axis=tuple(range(2, x.ndim)), keepdims=True),)
