"""TopK: the k largest (or smallest) elements along an axis and their int64 indices.

Equal values keep their index order (a stable sort), as the spec asks. k is an attribute in
TopK-1, a 1-element input from TopK-10; `largest` and `sorted` arrive in TopK-11.
"""
import numpy as np

from rtd.errors import Code, RtdError

from ._axes import normalize_axis
from .base import REQUIRED, Kernel


class TopK_11(Kernel):
    attributes = {"axis": -1, "largest": 1, "sorted": 1}

    def run(self, x, k):
        return self.top(x, int(self.host(k).reshape(-1)[0]))

    def top(self, x, k):
        xp = self.xp
        axis = normalize_axis(self.axis, x.ndim, self.op_type)
        if not 0 <= k <= x.shape[axis]:
            raise RtdError(Code.E_INPUT_INVALID, f"TopK: k={k} outside [0, {x.shape[axis]}] for axis {axis}")
        key = x
        if self.largest:  # an order-reversing map keeps the sort stable (argsort(-x) overflows ints)
            key = xp.negative(x) if x.dtype.kind == "f" else xp.invert(x)
        order = xp.argsort(key, axis=axis, kind="stable")
        indices = xp.take(order, xp.arange(k), axis=axis)
        return xp.take_along_axis(x, indices, axis=axis), indices.astype(np.int64, copy=False)


class TopK_10(TopK_11):
    attributes = {"axis": -1}
    largest, sorted = 1, 1


class TopK_1(TopK_10):
    attributes = {"axis": -1, "k": REQUIRED}

    def run(self, x):
        return self.top(x, self.k)
