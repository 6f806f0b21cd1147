"""The guarded call into scatter.c's scatter-add of whole rows, used by ScatterElements(reduction="add") where
each update row lands on a whole slice of the data (kernels/ops/_scatter.py): float32 C-contiguous NumPy
arrays only; anything else returns False and the kernel runs np.add.at, whose bits the C gives too.
"""
import numpy as np

from rtd.errors import Code, RtdError

from . import compiled

FLOAT32 = np.dtype(np.float32)


def scatter_add_rows(out, rows, updates) -> bool:
    """out[rows[e]] += updates[e] for each e in order, in place (out: (n, ...), rows: (m,) int64 within
    0..n-1, updates: (m, ...) with out's trailing shape); False when not taken."""
    if compiled is None or any(type(a) is not np.ndarray for a in (out, rows, updates)) or out.dtype != FLOAT32 \
            or updates.dtype != FLOAT32 or out.ndim < 1 or out.shape[1:] != updates.shape[1:] or rows.shape != updates.shape[:1] \
            or not (out.flags.c_contiguous and out.flags.writeable) or out.size == 0:
        return False
    rows, updates = np.ascontiguousarray(rows, np.int64), np.ascontiguousarray(updates)
    ffi = compiled.ffi
    width = out.size // out.shape[0]
    status = compiled.lib.rtd_scatter_add_rows_f32(ffi.from_buffer("float[]", out, require_writable=True), out.size, width,
                                                   ffi.from_buffer("int64_t[]", rows), rows.size,
                                                   ffi.from_buffer("float[]", updates), updates.size)
    if status != 0:   # the rows were wrapped and checked by the caller; the C checks again all the same
        raise RtdError(Code.E_INTERNAL, f"scatter kernel refused its arguments (status {status})")
    return True
