"""TopK: the k largest (or smallest) elements along an axis and their int64 indices.

Equal values keep their index order, as the spec asks. For keys of 32 bits or fewer each
element becomes one int64 (order-preserving key bits << 32 | index): the keys are then unique,
so an O(n) partition plus a sort of the k winners gives the stable answer that a full stable
argsort (5-10x slower) would. Wider types take the stable argsort.
k is an attribute in TopK-1, a 1-element input from TopK-10; `largest` and `sorted` arrive in
TopK-11 (results are always sorted, which `sorted=0` permits).
"""
import numpy as np

from rtd.errors import Code, RtdError

from ._axes import normalize_axis
from .base import REQUIRED, Kernel

_PACKABLE = {np.dtype(t) for t in (np.float16, np.float32, np.int8, np.int16, np.int32, np.uint8, np.uint16, np.bool_)}


def _packed(xp, key, axis):
    """int64 codes ordered like (key, index) along `axis`; key is float32-or-narrower."""
    if key.dtype.kind == "f":
        key = key.astype(np.float32, copy=False) + np.float32(0)  # -0.0 becomes +0.0: they tie
        bits = key.view(np.int32)
        bits = bits ^ ((bits >> 31) & np.int32(0x7FFFFFFF))  # IEEE order as signed-int order
    else:
        bits = key
    codes = bits.astype(np.int64)
    codes <<= 32
    index_shape = [1] * key.ndim
    index_shape[axis] = key.shape[axis]
    codes |= xp.arange(key.shape[axis], dtype=np.int64).reshape(index_shape)
    return codes


class TopK_11(Kernel):
    attributes = {"axis": -1, "largest": 1, "sorted": 1}

    def run(self, x, k):
        return self.top(x, int(self.host(k).reshape(-1)[0]))

    def top(self, x, k):
        xp = self.xp
        axis = normalize_axis(self.axis, x.ndim, self.op_type)
        n = x.shape[axis]
        if not 0 <= k <= n:
            raise RtdError(Code.E_INPUT_INVALID, f"TopK: k={k} outside [0, {n}] for axis {axis}")
        key = x
        if self.largest:  # an order-reversing map keeps ties in index order (-x overflows ints)
            key = xp.invert(x) if x.dtype.kind in "iub" else xp.negative(x)
        if x.dtype in _PACKABLE and 0 < k < n and n < 2**31:
            codes = _packed(xp, key, axis)
            codes = xp.partition(codes, k - 1, axis=axis)
            codes = xp.sort(xp.take(codes, xp.arange(k), axis=axis), axis=axis)
            indices = codes & np.int64(0xFFFFFFFF)
        else:
            order = xp.argsort(key, axis=axis, kind="stable")
            indices = xp.take(order, xp.arange(k), axis=axis).astype(np.int64, copy=False)
        return xp.take_along_axis(x, indices, axis=axis), indices


class TopK_10(TopK_11):
    attributes = {"axis": -1}
    largest, sorted = 1, 1


class TopK_1(TopK_10):
    attributes = {"axis": -1, "k": REQUIRED}

    def run(self, x):
        return self.top(x, self.k)
