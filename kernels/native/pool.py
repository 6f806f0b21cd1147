"""The guarded call into pool.c's pairwise sum along contiguous elements, used by the reductions' kernels
(sum_over: ReduceSum, ReduceMean, GlobalAveragePool) for float32 NumPy arrays, so a traced run and a native
program (whose REDUCE op runs the same C) agree bit for bit. Anything else returns None and the kernel
runs NumPy.
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
