"""The guarded call into resample.c's one-axis resampling, used by Resize's and Upsample's linear and cubic passes
(ops/_resize.py) over float32 NumPy arrays, so a traced run and a native program (whose RESAMPLE op runs the same
C) agree bit for bit. Anything else returns None and the kernel runs NumPy.
"""
import math

import numpy as np

from rtd.errors import Code, RtdError

from . import compiled

FLOAT32 = np.dtype(np.float32)


def tables(index: np.ndarray, weights: np.ndarray, in_size: int) -> tuple:
    """resample.h's (taps, out) tables for an axis plan's (out, taps) window: indices clamped to the edge
    (Resize replicates it) as int64, weights as float32, both contiguous."""
    return (np.ascontiguousarray(np.clip(index, 0, in_size - 1).T, np.int64),
            np.ascontiguousarray(weights.T, np.float32))


def resample(x, axis: int, index: np.ndarray, weights: np.ndarray):
    """x resampled along `axis` by an (out, taps) window of source indices and weights, or None when not taken."""
    if compiled is None or type(x) is not np.ndarray or x.dtype != FLOAT32 or not 0 <= axis < x.ndim or x.shape[axis] < 1:
        return None
    index, weights = tables(index, weights, x.shape[axis])
    x = np.ascontiguousarray(x)
    shape = list(x.shape)
    shape[axis] = index.shape[1]
    y = np.empty(shape, FLOAT32)
    ffi = compiled.ffi
    status = compiled.lib.rtd_resample_f32(
        ffi.from_buffer("float[]", x), x.size, ffi.from_buffer("float[]", y, require_writable=True), y.size,
        ffi.from_buffer("int64_t[]", index), index.size, ffi.from_buffer("float[]", weights), weights.size,
        math.prod(x.shape[:axis]), x.shape[axis], index.shape[1], math.prod(x.shape[axis + 1:]), index.shape[0])
    if status != 0:   # the checks above make this unreachable; the C checks again all the same
        raise RtdError(Code.E_INTERNAL, f"resampling kernel refused its arguments (status {status})")
    return y
