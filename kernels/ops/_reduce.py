"""The shared bases of the Reduce* ops: where the axes come from, and keepdims/noop handling.

An op file defines its reduction once on the `AxesFromInput` class (opset 13/18 on, axes as an
optional int64 input) and derives the older `AxesFromAttribute` version from it, e.g.
`class ReduceL1_18(AxesFromInput)` and `class ReduceL1_1(AxesFromAttribute, ReduceL1_18)`.
`reduce(x, axes, keepdims)` receives `axes` as a tuple of non-negative axes or None (all of them);
the empty tuple (noop_with_empty_axes) reduces nothing but still applies the op's element map.
"""
import math

import numpy as np

from ..native.pool import row_sums
from ._axes import normalize_axes
from .base import Kernel


class AxesFromInput(Kernel):
    attributes = {"keepdims": 1, "noop_with_empty_axes": 0}

    def run(self, data, axes=None):
        if axes is None or axes.size == 0:
            axes = () if self.noop_with_empty_axes else None
        else:
            axes = normalize_axes(self.host(axes), data.ndim, self.op_type)
        return (self.xp.asarray(self.reduce(data, axes, bool(self.keepdims))),)  # not a NumPy scalar

    def reduce(self, x, axes, keepdims):
        raise NotImplementedError


class AxesFromAttribute(Kernel):
    attributes = {"axes": None, "keepdims": 1}

    def run(self, data):
        axes = normalize_axes(self.axes, data.ndim, self.op_type) if self.axes else None
        return (self.xp.asarray(self.reduce(data, axes, bool(self.keepdims))),)


def sum_over(xp, x, axes, keepdims):
    """x summed over `axes` in x's dtype (None: all).

    Over trailing axes (contiguous elements) a non-empty float32 NumPy array takes the compiled pairwise sum
    (native/pool.py), the one a native program's REDUCE runs, so traced and planned runs agree bit for bit.
    Otherwise NumPy's pairwise sum over a short last axis pays a loop set-up per row (4x slower than
    einsum's straight SIMD loop at 128 wide): rows up to EINSUM_MAX_ROW long take einsum, whose
    plain accumulation then errs at most EINSUM_MAX_ROW ulps (typically sqrt of that).
    """
    if xp is np and x.dtype == np.float32 and x.size:
        first = 0 if axes is None else min(axes, default=x.ndim)
        if axes is None or (axes and sorted(axes) == list(range(first, x.ndim))):
            total = row_sums(x.reshape(math.prod(x.shape[:first]), -1))
            if total is not None:
                shape = tuple(1 if keepdims and a >= first else n for a, n in enumerate(x.shape) if keepdims or a < first)
                return total.reshape(shape)
    if (xp is np and axes == (x.ndim - 1,) and x.dtype in (np.float32, np.float64)
            and 0 < x.shape[-1] <= EINSUM_MAX_ROW):
        total = np.einsum("...i->...", x)
        return total[..., None] if keepdims else total
    return xp.sum(x, axis=axes, keepdims=keepdims, dtype=x.dtype)


EINSUM_MAX_ROW = 1024


def reduces_empty(x, axes) -> bool:
    """True when some reduced dimension has length 0 (max/min then need an initial value)."""
    return any(x.shape[a] == 0 for a in (range(x.ndim) if axes is None else axes))


def lowest(dtype):
    """The identity of max: -inf, the type's minimum, or False."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return np.iinfo(dtype).min
    return False if dtype.kind == "b" else -np.inf


def highest(dtype):
    """The identity of min: +inf, the type's maximum, or True."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return np.iinfo(dtype).max
    return True if dtype.kind == "b" else np.inf


def in_type_of(x, result):
    """`result` in x's dtype: integer inputs of mean/L2/log ops get the spec's truncation back."""
    return result if result.dtype == x.dtype else result.astype(x.dtype)
