"""The guarded call into tiles.c: a float32 ConvTranspose whose kernel is its stride (no dilation, padding, output
padding nor groups), used by the op's kernel (ops/op_conv_transpose.py) in traced and planned runs alike. Anything
else returns None and the kernel runs NumPy.
"""
import numpy as np

from rtd.errors import Code, RtdError

from . import compiled

FLOAT32 = np.dtype(np.float32)


def conv_transpose_tiles(x, weight, bias):
    """y (n, o, h·kh, w·kw) of x (n, c, h, w) and weight (c, o, kh, kw), bias (o) or None; None when not taken."""
    if (compiled is None or any(type(a) is not np.ndarray or a.dtype != FLOAT32 for a in (x, weight))
            or (bias is not None and (type(bias) is not np.ndarray or bias.dtype != FLOAT32 or bias.shape != weight.shape[1:2]))
            or x.ndim != 4 or weight.ndim != 4 or x.shape[1] != weight.shape[0] or x.shape[1] < 1):
        return None
    n, c, h, w = x.shape
    _, o, kh, kw = weight.shape
    x, weight = np.ascontiguousarray(x), np.ascontiguousarray(weight)
    bias = None if bias is None else np.ascontiguousarray(bias)
    y = np.empty((n, o, h * kh, w * kw), FLOAT32)
    ffi = compiled.ffi
    status = compiled.lib.rtd_conv_transpose_tiles_f32(
        ffi.from_buffer("float[]", x), x.size, ffi.from_buffer("float[]", weight), weight.size,
        ffi.NULL if bias is None else ffi.from_buffer("float[]", bias), 0 if bias is None else bias.size,
        ffi.from_buffer("float[]", y, require_writable=True), y.size, n, c, h, w, o, kh, kw)
    if status != 0:   # the checks above make this unreachable; the C checks again all the same
        raise RtdError(Code.E_INTERNAL, f"ConvTranspose tiles kernel refused its arguments (status {status})")
    return y
