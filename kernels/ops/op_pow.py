"""Pow: x ** y under broadcasting; the result keeps x's type whatever y's type is."""
import numpy as np

from ._legacy_broadcast import LegacyBroadcast
from .base import Elementwise


class Pow_7(Elementwise):
    cuda = "pow(in0, in1)"

    def compute(self, x, y, out=None):
        xp = self.xp
        if x.dtype.kind not in "iu":  # floats, bfloat16 (kind "V") included
            # y in x's float type keeps the power in x's precision instead of promoting to float64
            return xp.power(x, y.astype(x.dtype, copy=False), out=out)
        if y.dtype.kind == "i" and bool((y < 0).any()):  # NumPy refuses int ** negative int
            y = y.astype(np.float64)  # C's pow then truncation: 2 ** -1 -> 0, 1 ** -3 -> 1
        result = xp.power(x, y)  # integer base: NumPy's promotion, then back to x's type
        if out is None:
            return result.astype(x.dtype, copy=False)
        xp.copyto(out, result, casting="unsafe")
        return out


class Pow_1(LegacyBroadcast, Pow_7):
    """Opsets 1-6: broadcasting only when asked, B aligned at `axis`."""
