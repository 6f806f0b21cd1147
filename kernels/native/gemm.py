"""The guarded call into rtd's own GEMM (gemm.c): a (M, K) @ w (K, N) + bias, then ReLU, the rows
or columns shared out among the tenant's threads. Only what it takes is handed over (float32,
C-contiguous a and out, a weight that is C- or Fortran-contiguous); None otherwise, and NumPy runs.
"""
import numpy as np

from rtd.errors import Code, RtdError

from . import compiled

FLOAT32 = np.dtype(np.float32)


def gemm_rows(a, w, bias=None, relu: bool = False, out=None):
    """(M, N) float32, or None when the call is not taken."""
    if compiled is None or a.dtype != FLOAT32 or w.dtype != FLOAT32 or a.ndim != 2 or w.ndim != 2 \
            or a.shape[1] != w.shape[0] or not a.flags.c_contiguous or min(*a.shape, w.shape[1]) < 1:
        return None
    if w.flags.c_contiguous:
        b, transposed = w, 0
    elif w.T.flags.c_contiguous:
        b, transposed = w.T, 1   # (N, K) row-major: packed column by column
    else:
        return None
    m, k = a.shape
    n = w.shape[1]
    if bias is not None and (bias.dtype != FLOAT32 or bias.size != n or not bias.flags.c_contiguous):
        return None
    if out is None:
        out = np.empty((m, n), np.float32)
    elif out.shape != (m, n) or out.dtype != FLOAT32 or not out.flags.c_contiguous:
        return None
    ffi = compiled.ffi
    status = compiled.lib.rtd_gemm_rows(ffi.from_buffer("float[]", a), a.size, ffi.from_buffer("float[]", b), b.size,
                                        transposed, ffi.NULL if bias is None else ffi.from_buffer("float[]", bias),
                                        0 if bias is None else bias.size, ffi.from_buffer("float[]", out, require_writable=True),
                                        out.size, m, k, n, int(relu))
    if status != 0:   # the checks above make this unreachable; the C checks again all the same
        raise RtdError(Code.E_INTERNAL, f"GEMM kernel refused its arguments (status {status})")
    return out
