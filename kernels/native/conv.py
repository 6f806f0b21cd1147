"""Guarded calls into the GEMM convolution's compiled passes (conv.c): im2col and the epilogues.

Like depthwise.py: the C trusts the lengths it is given, so each call is checked here first
(dtypes, ranks, C-contiguous aligned buffers, the geometry, bounds that keep index products in
int64). A call these wrappers do not handle returns False/None and the caller runs NumPy.
"""
import numpy as np

from rtd.errors import Code, RtdError

from . import compiled
from .depthwise import LIMIT

IM2COL = {np.dtype(np.float32): "rtd_im2col_f32", np.dtype(np.uint8): "rtd_im2col_u8", np.dtype(np.int8): "rtd_im2col_s8"}
REQUANTIZE = {np.dtype(np.uint8): "rtd_requantize_u8", np.dtype(np.int8): "rtd_requantize_s8"}
FLOAT32 = np.dtype(np.float32)
CTYPES = {np.dtype(np.float32): "float[]", np.dtype(np.uint8): "uint8_t[]", np.dtype(np.int8): "int8_t[]",
          np.dtype(np.int32): "int32_t[]"}


def _ready(array) -> bool:
    flags = array.flags
    return flags.c_contiguous and flags.aligned


def _buffer(array, writable=False):
    return compiled.ffi.from_buffer(CTYPES[array.dtype], array, require_writable=writable)


def _check(status: int, what: str) -> None:
    if status != 0:   # the checks before the call make this unreachable; the C checks again all the same
        raise RtdError(Code.E_INTERNAL, f"{what} kernel refused its arguments (status {status})")


class Im2col:
    """One geometry's compiled im2col into its cols buffer (N, C, kh, kw, oh, ow) float32, checked
    once here (a conv layout makes it once per thread), so a call checks only x's dtype, shape and
    layout: the wrapper's own cost stays near a microsecond."""

    def __init__(self, x_shape, cols, k, strides, dilations, begin, end, out_shape):
        strides, dilations = list(strides or (1, 1)), list(dilations or (1, 1))
        self.x_shape, self.usable = tuple(x_shape), False
        if compiled is None or cols.dtype != FLOAT32 or len(x_shape) != 4 or len(k) != 2 or not _ready(cols):
            return
        n, c, h, w = x_shape
        if cols.shape != (n, c, *k, *out_shape) or cols.size == 0:
            return
        numbers = (*x_shape, *k, *out_shape, *strides, *dilations, *begin, *end)
        if any(not 0 <= v < LIMIT for v in numbers) or min(*strides, *dilations, *k) < 1:
            return
        for size, kk, s, d, b, e, o in zip((h, w), k, strides, dilations, begin, end, out_shape):
            if size + b + e < (kk - 1) * d + 1 or o != (size + b + e - (kk - 1) * d - 1) // s + 1:
                return
        self.x_size = n * c * h * w
        self.rest = (_buffer(cols, True), cols.size, n, c, h, w, *k, *out_shape, *strides, *dilations, begin[0], begin[1])
        self.usable = True

    def __call__(self, x, zero_point: int = 0) -> bool:
        """Fill cols from x (float32, or 8-bit minus `zero_point`); False (cols untouched) when the
        compiled pass does not take this x."""
        if not self.usable or x.shape != self.x_shape or not _ready(x):
            return False
        if x.dtype == FLOAT32:
            _check(compiled.lib.rtd_im2col_f32(_buffer(x), self.x_size, *self.rest), "im2col")
        elif x.dtype in IM2COL:
            _check(getattr(compiled.lib, IM2COL[x.dtype])(_buffer(x), self.x_size, *self.rest, zero_point), "im2col")
        else:
            return False
        return True


def bias_relu(y, bias, relu: bool) -> bool:
    """y (N, M, P) float32 in place: plus bias (M,) when given, then ReLU when asked."""
    if compiled is None or y.dtype != FLOAT32 or y.ndim != 3 or not _ready(y):
        return False
    if bias is None:
        status = compiled.lib.rtd_bias_relu_f32(_buffer(y, True), y.size, compiled.ffi.NULL, 0, *y.shape, relu)
    elif bias.dtype != FLOAT32 or bias.shape != (y.shape[1],) or not _ready(bias):
        return False
    else:
        status = compiled.lib.rtd_bias_relu_f32(_buffer(y, True), y.size, _buffer(bias), bias.size, *y.shape, relu)
    _check(status, "bias")
    return True


def requantize(acc, bias, multiplier, zero_point, dtype):
    """(N, M, P) 8-bit: onnxruntime's requantization of the exact float32 sums acc (N, M, P) plus the
    int32 bias (M,), times multiplier (1 or M float32), plus the zero point; None when not taken."""
    dtype = np.dtype(dtype)
    if compiled is None or dtype not in REQUANTIZE or acc.dtype != np.float32 or acc.ndim != 3 or not _ready(acc):
        return None
    m = acc.shape[1]
    multiplier = np.ascontiguousarray(multiplier, np.float32).reshape(-1)
    if multiplier.size not in (1, m) or (bias is not None and (bias.dtype != np.int32 or bias.size != m)):
        return None
    bias = None if bias is None else np.ascontiguousarray(bias).reshape(-1)
    y = np.empty(acc.shape, dtype)
    status = getattr(compiled.lib, REQUANTIZE[dtype])(
        _buffer(acc), acc.size, compiled.ffi.NULL if bias is None else _buffer(bias), 0 if bias is None else bias.size,
        _buffer(multiplier), multiplier.size, _buffer(y, True), y.size, *acc.shape, int(zero_point))
    _check(status, "requantize")
    return y
