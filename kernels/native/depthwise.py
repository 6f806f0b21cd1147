"""The guarded call into the compiled depthwise 2-D convolution (depthwise.c).

The C kernel trusts the lengths it is given, so everything it will touch is checked here
first: dtypes, ranks, that the filter is one (kh, kw) per channel, the output size the
geometry implies, C-contiguous aligned buffers (non-contiguous inputs are copied), and bounds
that keep every index product in int64. A call this wrapper does not handle returns None
and the caller runs the NumPy kernel; it never guesses. The planes are shared out among the
tenant's threads (threads.h) when there is enough work, each thread with its scratch plane.
"""
import enum

import numpy as np

from rtd.errors import Code, RtdError

from . import compiled

LIMIT = 1 << 30   # every dim, stride, dilation and pad below this keeps C's index sums within int64


class Refusal(enum.Enum):
    """Why a call goes to the NumPy kernel instead."""
    NOT_BUILT = "the compiled kernels are not installed"
    DTYPE = "only float32 input, weights and bias"
    SHAPE = "not a 2-D depthwise convolution with one (kh, kw) filter per channel"
    EMPTY = "a zero-size input or output"
    BOUNDS = "a dim, stride, dilation or pad at or above 2**30"
    GEOMETRY = "the output size does not follow from the input, kernel, strides, dilations and pads"


def refusal(x, w, bias, strides, dilations, begin, end, out_shape) -> Refusal | None:
    """None when the compiled kernel handles this call, else why not."""
    if compiled is None:
        return Refusal.NOT_BUILT
    if x.dtype != np.float32 or w.dtype != np.float32 or (bias is not None and bias.dtype != np.float32):
        return Refusal.DTYPE
    if x.ndim != 4 or w.ndim != 4 or w.shape[0] != x.shape[1] or w.shape[1] != 1 or len(out_shape) != 2 \
            or len(strides) != 2 or len(dilations) != 2 or len(begin) != 2 or len(end) != 2 \
            or (bias is not None and bias.shape != (x.shape[1],)):
        return Refusal.SHAPE
    if x.size == 0 or w.size == 0 or 0 in out_shape:
        return Refusal.EMPTY
    numbers = (*x.shape, *w.shape, *out_shape, *strides, *dilations, *begin, *end)
    if any(v >= LIMIT for v in numbers) or min(*strides, *dilations) < 1 or min(*begin, *end) < 0:
        return Refusal.BOUNDS
    for size, k, s, d, b, e, o in zip(x.shape[2:], w.shape[2:], strides, dilations, begin, end, out_shape):
        if size + b + e < (k - 1) * d + 1 or o != (size + b + e - (k - 1) * d - 1) // s + 1:
            return Refusal.GEOMETRY
    return None


def depthwise_conv2d(x, w, bias, strides, dilations, begin, end, out_shape, relu: bool = False):
    """(N, C, oh, ow) float32: the depthwise conv of x (N, C, H, W) with w (C, 1, kh, kw), plus
    bias (C,) and then ReLU when asked; None when `refusal` says the compiled kernel cannot run."""
    strides, dilations = list(strides or (1, 1)), list(dilations or (1, 1))
    if refusal(x, w, bias, strides, dilations, begin, end, out_shape) is not None:
        return None
    x = np.require(x, requirements=("C", "A"))
    w = np.require(w, requirements=("C", "A"))
    bias = None if bias is None else np.require(bias, requirements=("C", "A"))
    (n, c, h, wd), (kh, kw), (oh, ow) = x.shape, w.shape[2:], out_shape
    y = np.empty((n, c, oh, ow), np.float32)
    # the kernel's scratch plane (depthwise.h), one per thread it may use
    padded = np.zeros(compiled.lib.rtd_threads() * (h + begin[0] + end[0] + oh) * (wd + begin[1] + end[1]), np.float32)
    ffi, lib = compiled.ffi, compiled.lib
    status = lib.rtd_depthwise_conv2d_f32(
        ffi.from_buffer("float[]", x), x.size, ffi.from_buffer("float[]", w), w.size,
        ffi.NULL if bias is None else ffi.from_buffer("float[]", bias), 0 if bias is None else bias.size,
        ffi.from_buffer("float[]", y, require_writable=True), y.size,
        ffi.from_buffer("float[]", padded, require_writable=True), padded.size,
        n, c, h, wd, kh, kw, oh, ow, strides[0], strides[1], dilations[0], dilations[1],
        begin[0], begin[1], end[0], end[1], int(relu))
    if status != 0:   # the checks above make this unreachable; the C side checks again all the same
        raise RtdError(Code.E_INTERNAL, f"depthwise kernel refused its arguments (status {status})")
    return y
