"""The guarded call into the compiled activations (activation.c): exp, sigmoid, tanh, erf and GELU over
a float32 array, softmax and layer normalization along its last axis, used by those ops' kernels for float32 NumPy arrays (and, through the same C block
function, by the compiled element-wise chains), so a traced and a planned run agree bit for bit.
Anything else (other dtypes, non-contiguous or partly overlapping arrays, CuPy) returns None and the
op runs its NumPy form.
"""
import numpy as np

from rtd.errors import Code, RtdError

from . import compiled

FLOAT32 = np.dtype(np.float32)
SIGMOID, TANH, EXP, ERF, GELU, GELU_TANH, GELU_DIV = range(7)   # activation.h's RTD_ACT_*


def _fits(x, out) -> bool:
    """x a float32 C-contiguous NumPy array and out (None, or x, or) one of its shape not overlapping it."""
    if compiled is None or type(x) is not np.ndarray or x.dtype != FLOAT32 or not x.flags.c_contiguous:
        return False
    return out is None or (type(out) is np.ndarray and out.dtype == FLOAT32 and out.shape == x.shape
                           and out.flags.c_contiguous and out.flags.writeable
                           and not (np.may_share_memory(x, out) and out is not x and out.ctypes.data != x.ctypes.data))


def softmax_rows(x, out=None):
    """Softmax along x's last axis as a new array or into `out` (which may be x); None when not taken."""
    if not _fits(x, out) or x.ndim < 1 or x.shape[-1] < 1:
        return None
    out = np.empty(x.shape, FLOAT32) if out is None else out
    ffi = compiled.ffi
    status = compiled.lib.rtd_softmax_f32(ffi.from_buffer("float[]", x), x.size, ffi.from_buffer("float[]", out, require_writable=True),
                                          out.size, x.size // x.shape[-1], x.shape[-1])
    if status != 0:   # the checks above make this unreachable; the C checks again all the same
        raise RtdError(Code.E_INTERNAL, f"softmax kernel refused its arguments (status {status})")
    return out


def layernorm_rows(x, gamma, beta, epsilon: float, out=None):
    """Layer normalization along x's last axis, gamma and beta (float32, one per column) applied, as a new array
    or into `out` (which may be x); None when not taken."""
    if not _fits(x, out) or x.ndim < 1 or x.shape[-1] < 1 or not epsilon >= 0:
        return None
    cols = x.shape[-1]
    if any(type(p) is not np.ndarray or p.dtype != FLOAT32 or p.shape != (cols,) or not p.flags.c_contiguous for p in (gamma, beta)):
        return None
    out = np.empty(x.shape, FLOAT32) if out is None else out
    ffi = compiled.ffi
    status = compiled.lib.rtd_layernorm_f32(ffi.from_buffer("float[]", x), x.size, ffi.from_buffer("float[]", gamma), cols,
                                            ffi.from_buffer("float[]", beta), cols, ffi.from_buffer("float[]", out, require_writable=True),
                                            out.size, x.size // cols, cols, float(np.float32(epsilon)))
    if status != 0:   # the checks above make this unreachable; the C checks again all the same
        raise RtdError(Code.E_INTERNAL, f"layer normalization kernel refused its arguments (status {status})")
    return out


def activation(op: int, x, out=None):
    """f(x) as a new array or into `out` (which may be x itself); None when the call is not taken."""
    if not _fits(x, out):
        return None
    if out is None:
        out = np.empty(x.shape, FLOAT32)
    ffi = compiled.ffi
    status = compiled.lib.rtd_activation_f32(op, ffi.from_buffer("float[]", x), x.size,
                                             ffi.from_buffer("float[]", out, require_writable=True), out.size)
    if status != 0:   # the checks above make this unreachable; the C checks again all the same
        raise RtdError(Code.E_INTERNAL, f"activation kernel refused its arguments (status {status})")
    return out
