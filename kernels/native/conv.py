"""The guarded call into the compiled 2-D convolution (conv.c): rtd's own GEMM (gemm.c) over an
implicit im2col of a padded copy, and the epilogue (bias and ReLU, or 8-bit requantization), in one
call per convolution.

Like depthwise.py, the C trusts the lengths it is given, so the geometry is checked here once
per layout (`Conv2d`, made once per thread for each input shape) and each call checks only its
arrays' dtypes, shapes and layout. A call these wrappers do not take returns None and the caller
runs its NumPy path.
"""
import threading

import numpy as np

from rtd.errors import Code, RtdError

from . import compiled
from .packed import packed as kept
from .depthwise import LIMIT

FLOAT32 = np.dtype(np.float32)
TYPES = {FLOAT32: 0, np.dtype(np.uint8): 1, np.dtype(np.int8): 2}   # RTD_CONV_F32, _U8, _S8 (conv.h)
CTYPES = {FLOAT32: "float[]", np.dtype(np.uint8): "uint8_t[]", np.dtype(np.int8): "int8_t[]",
          np.dtype(np.int32): "int32_t[]"}


MAX_DEPTH = 16384   # conv.c's MAX_OFFSETS: C/group * kh * kw rows of the column matrix at most
CHAIN_INPUTS = 8    # conv.h's RTD_CONV_CHAIN_INPUTS
_local = threading.local()


def _scratch(floats: int):
    """This thread's scratch for the convolutions (the padded image), one buffer grown to
    the largest any layer needs: a call runs to its end before the thread makes another."""
    buffer = getattr(_local, "scratch", None)
    if buffer is None or buffer.size < floats:
        buffer = _local.scratch = np.empty(max(floats, 1), np.float32)
    return buffer


def _ready(array) -> bool:
    flags = array.flags
    return flags.c_contiguous and flags.aligned


def _buffer(array, writable=False):
    return compiled.ffi.from_buffer(CTYPES[array.dtype], array, require_writable=writable)


def _chain_arguments(chain, channels: int):
    """The C arguments of a fused chain (links, params, their count, inputs, lengths, input count), or None when
    an input is not one the epilogue takes (each must be float32: one value, or one per output channel)."""
    program, inputs = chain
    if program is None or len(inputs) != program.arity or len(inputs) > CHAIN_INPUTS:
        return None
    ffi = compiled.ffi
    buffers, lengths = [], []
    for value in inputs:
        if value is None:
            buffers.append(ffi.NULL)
            lengths.append(0)
            continue
        padded = (1,) * (4 - value.ndim) + tuple(value.shape)   # as it broadcasts against (N, M, H, W)
        if value.dtype != FLOAT32 or len(padded) != 4 or padded not in ((1, 1, 1, 1), (1, channels, 1, 1)):
            return None
        buffers.append(ffi.from_buffer("float[]", np.ascontiguousarray(value)))
        lengths.append(value.size)
    return (program.link_buffer, program.param_buffer, len(program.params) // 2, buffers, lengths, len(inputs))


def _pack(w, m: int, group: int):
    """The weights in the direct kernel's panels of 16 output channels."""
    ffi, k = compiled.ffi, w.size // m
    panels = np.empty(compiled.lib.rtd_conv2d_packed_weights(m, group, k), np.float32)
    status = compiled.lib.rtd_conv2d_pack_weights(ffi.from_buffer("float[]", w), w.size, m, group, k,
                                                  ffi.from_buffer("float[]", panels, require_writable=True), panels.size)
    if status != 0:   # the call's checks make this unreachable; the C checks again all the same
        raise RtdError(Code.E_INTERNAL, f"conv weight packing refused its arguments (status {status})")
    return panels


class Conv2d:
    """One 2-D convolution geometry, checked once; a call computes y from x, w and the epilogue's
    parameters in one compiled pass, or returns None when it does not take the call."""

    def __init__(self, x_shape, w_shape, group, k, strides, dilations, begin, end, out_shape):
        strides, dilations = list(strides or (1, 1)), list(dilations or (1, 1))
        self.usable = False
        if compiled is None or len(x_shape) != 4 or len(w_shape) != 4 or tuple(w_shape[2:]) != tuple(k) \
                or not len(k) == len(strides) == len(dilations) == len(begin) == len(end) == len(out_shape) == 2:
            return
        n, c, h, w = x_shape
        m, oh, ow = w_shape[0], *out_shape
        numbers = (*x_shape, *w_shape, *out_shape, *strides, *dilations, *begin, *end, group)
        if any(not 0 <= v < LIMIT for v in numbers) or min(c, h, w, m, oh, ow, group, *strides, *dilations) < 1:
            return
        if c % group or m % group or w_shape[1] != c // group:
            return
        for size, kk, s, d, b, e, o in zip((h, w), k, strides, dilations, begin, end, out_shape):
            if size + b + e < (kk - 1) * d + 1 or o != (size + b + e - (kk - 1) * d - 1) // s + 1:
                return
        if (c // group) * k[0] * k[1] > MAX_DEPTH:
            return
        self.x_shape, self.w_shape, self.y_shape = tuple(x_shape), tuple(w_shape), (n, m, oh, ow)
        self.geometry = (n, c, h, w, m, group, *k, oh, ow, *strides, *dilations, begin[0], begin[1])
        self.scratch_floats: dict = {}   # (x type, y type) -> rtd_conv2d_scratch's floats
        self.usable = True

    def __call__(self, x, w, bias=None, relu: bool = False, x_zero_point: int = 0, requantize=None,
                 constant=None, chain=None):
        """y (N, M, oh, ow): float32 plus bias (M,) float32 then ReLU; or, with `requantize` =
        (multiplier (1 or M) float32, zero point, dtype) and an int32 bias, the 8-bit output. `constant`:
        the weight array w comes from when it cannot change (w itself, or what w is a view of): the
        panels are made once for it and kept (native/packed.py).
        `chain` = (a native.chain.Program, its inputs: None for this convolution's output, else float32
        arrays of one value or one per output channel) runs on the float output in the same pass."""
        x_type = TYPES.get(x.dtype)
        if not self.usable or x_type is None or x.shape != self.x_shape or w.dtype != FLOAT32 \
                or w.shape != self.w_shape or not _ready(x) or not _ready(w):
            return None
        ffi, null = compiled.ffi, compiled.ffi.NULL
        if requantize is None:
            y_type, multiplier, y_zero_point = 0, None, 0
            if bias is not None and (bias.dtype != FLOAT32 or bias.shape != (self.w_shape[0],) or not _ready(bias)):
                return None
            y = np.empty(self.y_shape, np.float32)
        else:
            multiplier, y_zero_point, y_dtype = requantize
            y_type = TYPES.get(np.dtype(y_dtype), 0)
            if not y_type or multiplier.dtype != FLOAT32 or multiplier.size not in (1, self.w_shape[0]) \
                    or not _ready(multiplier) or (bias is not None and (bias.dtype != np.int32
                                                                       or bias.size != self.w_shape[0] or not _ready(bias))):
                return None
            y = np.empty(self.y_shape, y_dtype)
        links = _chain_arguments(chain, self.w_shape[0]) if chain is not None and requantize is None else ()
        if links is None:
            return None
        floats = self.scratch_floats.get((x_type, y_type))
        if floats is None:   # a geometry's need, asked of the C once
            floats = self.scratch_floats[x_type, y_type] = compiled.lib.rtd_conv2d_scratch(*self.geometry, x_type, y_type)
        scratch = _scratch(floats)
        m, group = self.w_shape[0], self.geometry[5]
        if constant is not None:
            packed, pack = kept(constant, ("conv", m, group, w.size), lambda: _pack(w, m, group)), False
        else:
            packed, pack = np.empty(compiled.lib.rtd_conv2d_packed_weights(m, group, w[0].size), np.float32), True
        bias_buffer = null if bias is None else _buffer(bias)
        status = compiled.lib.rtd_conv2d(
            _buffer(x), x_type, x.size, int(x_zero_point), _buffer(w), w.size,
            bias_buffer if requantize is None else null, null if requantize is None else bias_buffer,
            0 if bias is None else bias.size,
            null if multiplier is None else _buffer(multiplier), 0 if multiplier is None else multiplier.size,
            int(y_zero_point), ffi.from_buffer("char[]", y, require_writable=True), y_type, y.size,
            _buffer(scratch, True), scratch.size, _buffer(packed, pack), packed.size, int(pack),
            *(links or (null, null, 0, null, null, 0)), *self.geometry, int(relu))
        if status != 0:   # the checks above make this unreachable; the C checks again all the same
            raise RtdError(Code.E_INTERNAL, f"conv kernel refused its arguments (status {status})")
        return y
