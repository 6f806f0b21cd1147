"""The guarded calls into pool.c's pairwise sum along contiguous elements, used by the reductions' kernels
(sum_over: ReduceSum, ReduceMean, GlobalAveragePool), and its average pool over 2-D windows, used by
AveragePool's, for float32 NumPy arrays, so a traced run and a native program (whose REDUCE and AVERAGE_POOL
ops run the same C) agree bit for bit. Anything else returns None and the kernel runs NumPy.
"""
import numpy as np

from rtd.errors import Code, RtdError

from . import compiled

FLOAT32 = np.dtype(np.float32)
SUM = 0   # pool.h's RTD_REDUCE_SUM


def row_sums(x):
    """The sums of x's rows (x: (rows, r), r >= 1) as a new float32 array of rows values, or None when not taken."""
    if compiled is None or type(x) is not np.ndarray or x.dtype != FLOAT32 or x.ndim != 2 or x.shape[1] < 1:
        return None
    x = np.ascontiguousarray(x)
    y = np.empty(x.shape[0], FLOAT32)
    ffi = compiled.ffi
    status = compiled.lib.rtd_reduce_f32(SUM, ffi.from_buffer("float[]", x), x.size,
                                         ffi.from_buffer("float[]", y, require_writable=True), y.size, x.shape[0], x.shape[1], 1)
    if status != 0:   # the checks above make this unreachable; the C checks again all the same
        raise RtdError(Code.E_INTERNAL, f"reduction kernel refused its arguments (status {status})")
    return y


def average_pool2d(x, kernel, strides, dilations, begin, out_shape, counted_begin, counted_end):
    """The window means of x (N, C, H, W) as pool.c makes them (pool.h's rtd_average_pool2d_f32), or None when not taken."""
    if compiled is None or type(x) is not np.ndarray or x.dtype != FLOAT32 or x.ndim != 4 or len(kernel) != 2 or min(x.shape) < 1:
        return None
    numbers = average_numbers(x.shape, kernel, strides, dilations, begin, out_shape, counted_begin, counted_end)
    if min(numbers[4:]) < 0 or min(numbers[8:12]) < 1:
        return None
    x = np.ascontiguousarray(x)
    y = np.empty(x.shape[:2] + tuple(out_shape), FLOAT32)
    ffi = compiled.ffi
    status = compiled.lib.rtd_average_pool2d_f32(
        ffi.from_buffer("float[]", x), x.size, ffi.from_buffer("float[]", y, require_writable=True), y.size, *numbers)
    if status != 0:   # the checks above make this unreachable; the C checks again all the same
        raise RtdError(Code.E_INTERNAL, f"average pool kernel refused its arguments (status {status})")
    return y


def average_numbers(shape, kernel, strides, dilations, begin, out_shape, counted_begin, counted_end):
    """pool.h's rtd_average_pool2d_f32 geometry after its lengths: program.h's AVERAGE_POOL parameters."""
    return (*shape, *kernel, *out_shape, *(strides or (1, 1)), *(dilations or (1, 1)), begin[0], begin[1],
            counted_begin[0], counted_end[0], counted_begin[1], counted_end[1])
