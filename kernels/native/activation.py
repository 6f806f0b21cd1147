"""The guarded call into the compiled activations (activation.c): exp, sigmoid, tanh, erf and GELU over
a float32 array, used by those ops' kernels for float32 NumPy arrays (and, through the same C block
function, by the compiled element-wise chains), so a traced and a planned run agree bit for bit.
Anything else (other dtypes, non-contiguous or partly overlapping arrays, CuPy) returns None and the
op runs its NumPy form.
"""
import numpy as np

from rtd.errors import Code, RtdError

from . import compiled

FLOAT32 = np.dtype(np.float32)
SIGMOID, TANH, EXP, ERF, GELU, GELU_TANH = range(6)   # activation.h's RTD_ACT_*


def activation(op: int, x, out=None):
    """f(x) as a new array or into `out` (which may be x itself); None when the call is not taken."""
    if compiled is None or type(x) is not np.ndarray or x.dtype != FLOAT32 or not x.flags.c_contiguous:
        return None
    if out is None:
        out = np.empty(x.shape, FLOAT32)
    elif type(out) is not np.ndarray or out.dtype != FLOAT32 or out.shape != x.shape or not out.flags.c_contiguous \
            or not out.flags.writeable or (np.may_share_memory(x, out) and out is not x and out.ctypes.data != x.ctypes.data):
        return None
    ffi = compiled.ffi
    status = compiled.lib.rtd_activation_f32(op, ffi.from_buffer("float[]", x), x.size,
                                             ffi.from_buffer("float[]", out, require_writable=True), out.size)
    if status != 0:   # the checks above make this unreachable; the C checks again all the same
        raise RtdError(Code.E_INTERNAL, f"activation kernel refused its arguments (status {status})")
    return out
