"""The guarded calls into quant.c's per-tensor quantization of float32 (rtd_quantize_f32) and its range
(rtd_range_f32), and DynamicQuantizeLinear's whole step (rtd_dynamic_quantize_f32: range, scale and zero
point, values), which its kernel runs for NumPy arrays and a compiled plan runs as a program op, so both give
the same bytes: one pass for the range instead of np.min's and np.max's two, one for the values instead of
NumPy's four (divide, rint, clip, add), each value in the same float32 steps (x / scale rounded once, half to
even, plus the zero point, saturated). And MatMulInteger's 8-bit product (matmul_8bit.c's rtd_matmul_8bit), summed in int32 from the bytes
instead of a float copy of A through a float GEMM: the sums are exact integers either way, so both give
the same int32. Anything else (other dtypes, strided or empty arrays, CuPy) returns None.
"""
import numpy as np

from rtd.errors import Code, RtdError

from . import compiled

FLOAT32 = np.dtype(np.float32)
TYPES = {np.dtype(np.uint8): 1, np.dtype(np.int8): 2}   # conv.h's RTD_CONV_U8, RTD_CONV_S8
VALUE = 4   # depthwise.h's RTD_NATIVE_E_VALUE: a value in the data the op has no result for


def _fits(x) -> bool:
    return compiled is not None and type(x) is np.ndarray and x.dtype == FLOAT32 and x.flags.c_contiguous


def value_range(x) -> tuple | None:
    """(least, greatest) of x as floats, both NaN where x has one (as np.min and np.max), or None when not taken."""
    if not _fits(x) or x.size == 0:
        return None
    ffi = compiled.ffi
    ends = np.empty(2, FLOAT32)
    status = compiled.lib.rtd_range_f32(ffi.from_buffer("float[]", x), x.size, ffi.from_buffer("float[]", ends, require_writable=True), 2)
    if status != 0:   # the checks above make this unreachable; the C checks again all the same
        raise RtdError(Code.E_INTERNAL, f"range kernel refused its arguments (status {status})")
    return float(ends[0]), float(ends[1])


def dynamic_quantize(x) -> tuple | None:
    """DynamicQuantizeLinear's (y uint8, scale float32 0-d, zero point uint8 0-d), or None when not taken."""
    if not _fits(x):
        return None
    y, scale, zero_point = np.empty(x.shape, np.uint8), np.empty((), FLOAT32), np.empty((), np.uint8)
    ffi = compiled.ffi
    status = compiled.lib.rtd_dynamic_quantize_f32(
        ffi.from_buffer("float[]", x), x.size, ffi.from_buffer("uint8_t[]", y, require_writable=True), y.size,
        ffi.from_buffer("float[]", scale.reshape(1), require_writable=True), 1,
        ffi.from_buffer("uint8_t[]", zero_point.reshape(1), require_writable=True), 1)
    if status == VALUE:
        raise RtdError(Code.E_INPUT_INVALID, "DynamicQuantizeLinear: the input holds a NaN or -inf, which has no zero point")
    if status != 0:   # the checks above make this unreachable; the C checks again all the same
        raise RtdError(Code.E_INTERNAL, f"dynamic quantize kernel refused its arguments (status {status})")
    return y, scale, zero_point


def quantize(x, scale, zero_point: int, dtype):
    """saturate(round_half_even(x / scale) + zero_point) as a new `dtype` array, or None when not taken."""
    dtype = np.dtype(dtype)
    if not _fits(x) or dtype not in TYPES:
        return None
    y = np.empty(x.shape, dtype)
    ffi = compiled.ffi
    status = compiled.lib.rtd_quantize_f32(ffi.from_buffer("float[]", x), x.size, float(np.float32(scale)), int(zero_point),
                                           ffi.from_buffer("uint8_t[]", y.view(np.uint8), require_writable=True), TYPES[dtype], y.size)
    if status != 0:   # the checks above make this unreachable; the C checks again all the same
        raise RtdError(Code.E_INTERNAL, f"quantize kernel refused its arguments (status {status})")
    return y


MAX_K = 32768   # quant.h's bound on rtd_matmul_8bit's k (also keeps k * 255 * 255 within int32)


def matmul_8bit(a, a_zero_point: int, w, w_zero_point, out=None):
    """(a - a_zero_point) @ (w - w_zero_point) as int32 (..., n): a 8-bit (..., k), w 8-bit (k, n) as stored, w_zero_point
    of w's type, one or n of them; into `out` (int32, C-contiguous, that shape) where given; None when not taken."""
    w_zero = np.ascontiguousarray(w_zero_point, np.int32).reshape(-1)
    if compiled is None or type(a) is not np.ndarray or a.dtype not in TYPES or a.ndim < 2 or not a.flags.c_contiguous \
            or type(w) is not np.ndarray or w.dtype not in TYPES or w.ndim != 2 or not w.flags.c_contiguous \
            or not 0 < a.shape[-1] == w.shape[0] <= MAX_K or w.shape[1] < 1 or w_zero.size not in (1, w.shape[1]):
        return None
    k, n = w.shape
    m = a.size // k
    y = np.empty(a.shape[:-1] + (n,), np.int32) if out is None else out
    if type(y) is not np.ndarray or y.dtype != np.int32 or y.shape != a.shape[:-1] + (n,) or not y.flags.c_contiguous:
        return None
    ffi = compiled.ffi
    status = compiled.lib.rtd_matmul_8bit(ffi.from_buffer("uint8_t[]", a.view(np.uint8)), TYPES[a.dtype], a.size, int(a_zero_point),
                                          ffi.from_buffer("uint8_t[]", w.view(np.uint8)), TYPES[w.dtype], w.size,
                                          ffi.from_buffer("int32_t[]", w_zero), w_zero.size,
                                          ffi.from_buffer("int32_t[]", y, require_writable=True), y.size, m, k, n)
    if status != 0:   # the checks above and the caller's (zero points of a's and w's types) make this unreachable
        raise RtdError(Code.E_INTERNAL, f"8-bit matmul kernel refused its arguments (status {status})")
    return y
