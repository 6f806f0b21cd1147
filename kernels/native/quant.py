"""The guarded call into quant.c's per-tensor quantization of float32 (rtd_quantize_f32), used by
DynamicQuantizeLinear for NumPy arrays: one pass instead of NumPy's four (divide, rint, clip, add), each
value in the same float32 steps (x / scale rounded once, half to even, plus the zero point, saturated),
so both give the same bytes. Anything else (other dtypes, strided arrays, CuPy) returns None.
"""
import numpy as np

from rtd.errors import Code, RtdError

from . import compiled

FLOAT32 = np.dtype(np.float32)
TYPES = {np.dtype(np.uint8): 1, np.dtype(np.int8): 2}   # conv.h's RTD_CONV_U8, RTD_CONV_S8


def quantize(x, scale, zero_point: int, dtype):
    """saturate(round_half_even(x / scale) + zero_point) as a new `dtype` array, or None when not taken."""
    dtype = np.dtype(dtype)
    if compiled is None or type(x) is not np.ndarray or x.dtype != FLOAT32 or not x.flags.c_contiguous or dtype not in TYPES:
        return None
    y = np.empty(x.shape, dtype)
    ffi = compiled.ffi
    status = compiled.lib.rtd_quantize_f32(ffi.from_buffer("float[]", x), x.size, float(np.float32(scale)), int(zero_point),
                                           ffi.from_buffer("uint8_t[]", y.view(np.uint8), require_writable=True), TYPES[dtype], y.size)
    if status != 0:   # the checks above make this unreachable; the C checks again all the same
        raise RtdError(Code.E_INTERNAL, f"quantize kernel refused its arguments (status {status})")
    return y
