"""The guarded call into rtd's own GEMM (gemm.c): a (M, K) @ w (K, N) + bias, then ReLU, the rows
or columns shared out among the tenant's threads. Only what it takes is handed over (float32,
C-contiguous a and out, a weight that is C- or Fortran-contiguous); None otherwise, and NumPy runs.
A constant weight (the caller says so only for weights that cannot change) is packed into the GEMM's
panels once and kept (native/packed.py), as onnxruntime packs its weights when a session is made;
others are packed block by block on every call.
"""
import numpy as np

from rtd.errors import Code, RtdError

from . import compiled
from .packed import packed

FLOAT32 = np.dtype(np.float32)
ROWS, COLUMNS, PACKED = 0, 1, 2   # gemm.h's b layouts


def _pack(b, layout: int, k: int, n: int):
    ffi = compiled.ffi
    panels = np.empty(compiled.lib.rtd_gemm_packed_len(k, n), np.float32)
    status = compiled.lib.rtd_gemm_pack(ffi.from_buffer("float[]", b), b.size, layout, k, n,
                                        ffi.from_buffer("float[]", panels, require_writable=True), panels.size)
    if status != 0:   # gemm_rows's checks make this unreachable; the C checks again all the same
        raise RtdError(Code.E_INTERNAL, f"GEMM packing refused its arguments (status {status})")
    return panels


def gemm_rows(a, w, bias=None, relu: bool = False, out=None, constant: bool = False, owner=None):
    """(M, N) float32, or None when the call is not taken. `constant`: w cannot change (its panels are kept,
    with `owner` when w is a view made per call of that array)."""
    if compiled is None or a.dtype != FLOAT32 or w.dtype != FLOAT32 or a.ndim != 2 or w.ndim != 2 \
            or a.shape[1] != w.shape[0] or not a.flags.c_contiguous or min(*a.shape, w.shape[1]) < 1:
        return None
    taken = weight_layout(w)
    if taken is None:
        return None
    b, layout = taken
    m, k = a.shape
    n = w.shape[1]
    if bias is not None and (bias.dtype != FLOAT32 or bias.size != n or not bias.flags.c_contiguous):
        return None
    if out is None:
        out = np.empty((m, n), np.float32)
    elif out.shape != (m, n) or out.dtype != FLOAT32 or not out.flags.c_contiguous:
        return None
    if constant:
        b, layout = packed(w if owner is None else owner, ("gemm", layout, k, n), lambda: _pack(b, layout, k, n)), PACKED
    return _rows(a, b, layout, bias, relu, out, m, k, n)


def weight_layout(w) -> tuple | None:
    """How the GEMM reads a (K, N) weight: (w, ROWS), or (w.T, COLUMNS) where w is the transpose of a row-major
    (N, K) matrix (packed column by column); None where it is neither."""
    if w.flags.c_contiguous:
        return w, ROWS
    if w.T.flags.c_contiguous:
        return w.T, COLUMNS
    return None


def pack_weight(w) -> np.ndarray | None:
    """A float32 (K, N) weight (C- or Fortran-contiguous) as the GEMM's panels, or None where it does not take it."""
    taken = None if compiled is None or w.dtype != FLOAT32 or w.ndim != 2 or min(w.shape) < 1 else weight_layout(w)
    if taken is None:
        return None
    panels = _pack(*taken, *w.shape)
    panels.flags.writeable = False
    return panels


def gemm_panels(a, panels, k: int, n: int, bias=None, out=None):
    """a (M, K) @ the (K, N) weight whose panels `pack_weight` made + bias: (M, N) float32. There is no other
    form of the weight to fall back on, so what the GEMM cannot take is a ValueError (float64 rows, say)."""
    if a.dtype != FLOAT32 or a.ndim != 2 or a.shape[1] != k or not a.flags.c_contiguous:
        raise ValueError(f"a product with a float32 ({k}, {n}) weight got {a.dtype} rows of shape {list(a.shape)}")
    if panels.dtype != FLOAT32 or panels.size != compiled.lib.rtd_gemm_packed_len(k, n):
        raise ValueError(f"{panels.size} floats are not the panels of a ({k}, {n}) weight")
    if bias is not None and (bias.dtype != FLOAT32 or bias.size != n or not bias.flags.c_contiguous):
        raise ValueError(f"a product with a float32 ({k}, {n}) weight got a {bias.dtype} bias of {bias.size}")
    m = a.shape[0]
    if out is None:
        out = np.empty((m, n), np.float32)
    elif out.shape != (m, n) or out.dtype != FLOAT32 or not out.flags.c_contiguous:
        raise ValueError(f"a product of {m} rows by a ({k}, {n}) weight got an output of shape {list(out.shape)}")
    return out if m == 0 else _rows(a, panels, PACKED, bias, False, out, m, k, n)


def _rows(a, b, layout: int, bias, relu: bool, out, m: int, k: int, n: int):
    ffi = compiled.ffi
    status = compiled.lib.rtd_gemm_rows(ffi.from_buffer("float[]", a), a.size, ffi.from_buffer("float[]", b), b.size,
                                        layout, ffi.NULL if bias is None else ffi.from_buffer("float[]", bias),
                                        0 if bias is None else bias.size, ffi.from_buffer("float[]", out, require_writable=True),
                                        out.size, m, k, n, int(relu))
    if status != 0:   # the callers' checks make this unreachable; the C checks again all the same
        raise RtdError(Code.E_INTERNAL, f"GEMM kernel refused its arguments (status {status})")
    return out


def gemm_batched(a, b, out=None):
    """a (..., M, K) @ b (..., K, N) with the same leading axes, float32, every product whole on one thread
    (or one product's rows shared when there are fewer products than threads), or None when not taken:
    what a native program's MATMUL op runs, so a traced run and a planned one agree bit for bit."""
    if compiled is None or type(a) is not np.ndarray or type(b) is not np.ndarray or a.dtype != FLOAT32 \
            or b.dtype != FLOAT32 or a.ndim < 2 or a.shape[:-2] != b.shape[:-2] or b.ndim != a.ndim \
            or a.shape[-1] != b.shape[-2] or min(a.shape[-2:] + b.shape[-1:]) < 1:
        return None
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    (m, k), n = a.shape[-2:], b.shape[-1]
    batch = a.size // (m * k)
    shape = a.shape[:-2] + (m, n)
    if out is None:
        out = np.empty(shape, np.float32)
    elif out.shape != shape or out.dtype != FLOAT32 or not out.flags.c_contiguous:
        return None
    if batch < 1:
        return out
    ffi = compiled.ffi
    status = compiled.lib.rtd_gemm_batched(ffi.from_buffer("float[]", a), a.size, ffi.from_buffer("float[]", b), b.size, ROWS,
                                           ffi.from_buffer("float[]", out, require_writable=True), out.size, batch, m, k, n,
                                           m * k, k * n)
    if status != 0:   # the checks above make this unreachable; the C checks again all the same
        raise RtdError(Code.E_INTERNAL, f"batched GEMM kernel refused its arguments (status {status})")
    return out
