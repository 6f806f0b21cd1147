"""Convolution as GEMM, shared by Conv, ConvInteger and QLinearConv.

The plan is chosen per call from the shapes (cheap integer arithmetic):
- 1x1, stride 1, no pad: one matmul W(M, C) @ X(N, C, H*W) straight over NCHW, no copy;
- depthwise (C == group == M): 2-D float32 runs the compiled kernel (native/depthwise.py: bias
  and ReLU in the same pass); otherwise, or without the compiled kernels, one NumPy multiply-add
  per kernel tap over the whole tensor;
- without the compiled kernels, few output channels and many pixels (e.g. ResNet's 64-channel
  56x56 stage): "pixel-major" im2col from a channels-last copy of the input, cols (pixels, k*k*C)
  @ W^T (k*k*C, M), then one transposing copy to NCHW — NumPy's strided im2col costs more than
  that copy there; with the compiled im2col, channel-major is faster at every measured shape
  (bench/RESULTS.md, issue 10);
- otherwise channel-major im2col: cols (N, group, C/group*k*k, pixels), one batched W @ cols.
Every 2-D convolution but the depthwise one first goes to the compiled convolution
(native/conv.py: im2col in cache-sized tiles, rtd's own GEMM, bias and ReLU or the 8-bit
requantization, in one call); the NumPy plans run what it does not take, or without it.
Each geometry's plan and compiled call are made once per thread (`_Layout`), the NumPy padded-input
and im2col buffers on first use.
"""
import math

import numpy as np

from rtd.errors import Code, RtdError

from ..native import conv as native_conv
from ..native.depthwise import depthwise_conv2d
from ._quant import FLOAT32_EXACT, CentredWeight, centred, frozen, span
from ._window import geometry, pad_into, per_thread, scratch, taps, windows


class _Layout:
    """One conv geometry (input shape, weights, attributes), worked out once per thread: output
    size, pads, the GEMM plan and, for the im2col plans, the padded-input and im2col buffers with
    the strided window view that fills one from the other. A call then makes two copies and a
    GEMM instead of re-deriving geometry and views (tens of microseconds per small conv)."""

    def __init__(self, xp, x_shape, dtype, w_shape, group, k, strides, dilations, pads, auto_pad):
        c, m, nd = x_shape[1], w_shape[0], len(k)
        self.out_shape, self.begin, self.end = geometry(x_shape[2:], k, strides, dilations, pads, auto_pad)
        self.pixels = math.prod(self.out_shape)
        self.k, self.strides, self.dilations = k, strides, dilations
        self.x_shape, self.dtype = x_shape, dtype
        self.padded = self.inner = self.cols = self.source = self.compiled = None
        self.padding = any(self.begin) or any(self.end)
        if all(v == 1 for v in k) and all(s == 1 for s in (strides or [1])) and not self.padding:
            self.plan = "pointwise"
        elif group == c == m and group > 1:
            self.plan = "depthwise"
        elif native_conv.compiled is None and group == 1 and nd == 2 and c >= 16 and self.pixels >= 8 * m:
            self.plan = "pixel_major"   # NumPy's im2col costs more than a transposing copy here
        else:
            self.plan = "channel_major"
        if xp is np and nd in (1, 2) and self.plan != "depthwise":
            # a 1-D convolution is the 2-D one over a single row
            row = (lambda dims, one: dims if nd == 2 else [one] + list(dims))
            compiled = native_conv.Conv2d(x_shape[:2] + tuple(row(x_shape[2:], 1)), tuple(w_shape[:2]) + tuple(row(k, 1)),
                                          group, row(k, 1), row(strides or [1] * nd, 1), row(dilations or [1] * nd, 1),
                                          row(self.begin, 0), row(self.end, 0), row(self.out_shape, 1))
            self.compiled = compiled if compiled.usable else None

    def _numpy_buffers(self, xp):
        """The NumPy plans' padded-input and im2col buffers and the window view between them."""
        x_shape, dtype, k = self.x_shape, self.dtype, self.k
        n, c = x_shape[:2]
        strides, dilations = self.strides, self.dilations
        if self.plan == "pixel_major":
            (kh, kw), (oh, ow) = k, self.out_shape
            self.padded = xp.zeros((n,) + tuple(i + b + e for i, b, e in zip(x_shape[2:], self.begin, self.end)) + (c,), dtype)
            self.inner = self.padded[(slice(None),) + tuple(slice(b, b + i) for b, i in zip(self.begin, x_shape[2:]))]
            sh, sw = strides or (1, 1)
            dh, dw = dilations or (1, 1)
            span = ((kh - 1) * dh + 1, (kw - 1) * dw + 1)
            view = xp.lib.stride_tricks.sliding_window_view(self.padded, span, axis=(1, 2))  # (N, H', W', C, span_h, span_w)
            view = view[:, :(oh - 1) * sh + 1:sh, :(ow - 1) * sw + 1:sw, :, ::dh, ::dw]
            self.cols = xp.empty((n, oh, ow, kh, kw, c), dtype)
            self.source = view.transpose(0, 1, 2, 4, 5, 3)
        else:
            self.cols = xp.empty((n, c) + tuple(k) + tuple(self.out_shape), dtype)
            if self.padding:
                self.padded = xp.zeros(x_shape[:2] + tuple(i + b + e for i, b, e in zip(x_shape[2:], self.begin, self.end)), dtype)
                self.inner = self.padded[(slice(None), slice(None)) + tuple(slice(b, b + i) for b, i in zip(self.begin, x_shape[2:]))]
                self.source = self._windows(xp, self.padded)

    def _windows(self, xp, padded):
        """The (N, C, *k, *out) window view of a padded input: im2col's source."""
        nd = len(self.k)
        view = windows(xp, padded, self.k, self.strides, self.dilations, self.out_shape)  # (N, C, *out, *k)
        return view.transpose((0, 1) + tuple(range(2 + nd, 2 + 2 * nd)) + tuple(range(2, 2 + nd)))

    def im2col(self, xp, x):
        """The im2col buffer filled from x (NHWC columns for the pixel-major plan)."""
        if self.cols is None:
            self._numpy_buffers(xp)
        if self.plan == "pixel_major":
            self.inner[...] = x.transpose(0, 2, 3, 1)
        elif self.padded is not None:
            self.inner[...] = x
        self.cols[...] = self.source if self.source is not None else self._windows(xp, x)
        return self.cols


def conv(xp, x, w, bias, group, kernel_shape, strides, dilations, pads, auto_pad, acc_dtype=None, relu=False,
         x_zero_point=None, requantize=None, chain=None):
    """ONNX Conv of x (N, C, *S) with w (M, C/group, *k), then ReLU when `relu`; the result is in
    `acc_dtype` (default x's). With `x_zero_point` (a host array), x is an integer tensor convolved
    as x - x_zero_point. With `requantize` (multiplier, zero point, 8-bit dtype) and an int32 bias,
    the compiled convolution may return the requantized 8-bit output instead of the float sums
    (the caller tells them apart by dtype). The compiled kernel's panels of w are kept when w cannot
    change (`frozen`). `chain` = (a
    native.chain.Program or None, its inputs with None for this output, a function finishing y with the
    chain) is applied to the float result: by the compiled convolution in its pass, else by the function."""
    n, c = x.shape[:2]
    m = w.shape[0]
    k = list(kernel_shape or w.shape[2:])
    nd = len(k)
    if x.ndim != nd + 2 or c != w.shape[1] * group or m % group:
        raise RtdError(Code.E_INPUT_INVALID, f"Conv: input {x.shape} does not fit weights {w.shape} with group {group}")
    acc_dtype = np.dtype(acc_dtype or x.dtype)
    w = w_source = w.astype(acc_dtype, copy=False)   # w_source: what the panels are kept for (a 1-D conv passes a view)
    key = ("conv-layout", x.shape, acc_dtype, w.shape, group, tuple(k), tuple(strides or ()), tuple(dilations or ()),
           tuple(pads or ()), auto_pad, xp.__name__)
    layout = per_thread(key, lambda: _Layout(xp, x.shape, acc_dtype, w.shape, group, k, strides, dilations, pads, auto_pad))
    out_shape, pixels = layout.out_shape, layout.pixels
    if layout.compiled is not None:   # it also centres 8-bit inputs and may requantize
        in_pass = chain[:2] if chain is not None and chain[0] is not None and nd == 2 else None   # the chain on its tiles
        row = (lambda a: a) if nd == 2 else (lambda a: a.reshape(a.shape[:2] + (1,) + a.shape[2:]))
        # a strided view (a transposed input) is copied once: the compiled pass reads only contiguous
        # inputs, and the NumPy im2col it would fall back to costs k*k times that copy in memory
        y = layout.compiled(row(np.ascontiguousarray(x)), row(w), bias if requantize is not None or bias is None else bias.astype(acc_dtype, copy=False),
                            relu, 0 if x_zero_point is None else int(x_zero_point.reshape(-1)[0]), requantize,
                            w_source if frozen(w_source) else None, in_pass)
        if y is not None:
            y = y if nd == 2 else y.reshape(y.shape[:2] + y.shape[3:])
            return y if chain is None or in_pass is not None else chain[2](y)
    if requantize is not None:
        bias = None   # the caller adds the int32 bias to the float sums itself
    if bias is not None:
        bias = bias.astype(acc_dtype, copy=False)
    if x.dtype != acc_dtype:
        x = centred(x, x_zero_point, dtype=acc_dtype)
    if layout.plan == "depthwise" and xp is np and nd == 2:
        y = depthwise_conv2d(x, w, bias, strides, dilations, layout.begin, layout.end, out_shape, relu)
        if y is not None:
            return y if chain is None else chain[2](y)
    if layout.plan == "pointwise":
        y = _weights_times(xp, w.reshape(group, m // group, c // group), x.reshape(n, group, c // group, pixels))
    elif layout.plan == "depthwise":
        y = _depthwise(xp, x, w, k, strides, dilations, layout.begin, layout.end, out_shape)
    elif layout.plan == "pixel_major":
        y = _pixel_major(xp, layout.im2col(xp, x), w)
    else:
        kk = math.prod(k)
        y = _weights_times(xp, w.reshape(group, m // group, (c // group) * kk),
                           layout.im2col(xp, x).reshape(n, group, (c // group) * kk, pixels))
    y = y.reshape((n, m, pixels))
    if bias is not None:
        y += bias.reshape(1, m, 1)
    if relu:
        xp.maximum(y, y.dtype.type(0), out=y)
    y = y.reshape((n, m) + tuple(out_shape))
    return y if chain is None else chain[2](y)


class IntegerConv:
    """The exact int32 convolution of (x - x_zp) with (w - w_zp) shared by ConvInteger and QLinearConv: in
    float32 when no sum can reach 2^24 (K = C/group · kernel taps terms, each at most max|x - x_zp| ·
    max|w - w_zp|), else in float64; the centred weights are made once (`CentredWeight`). Mixed into a
    Kernel that carries the Conv attributes."""

    CONV_ATTRIBUTES = {"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None,
                       "pads": None, "strides": None}

    def setup(self):
        self.weight = CentredWeight()

    def accumulate(self, x, x_zero_point, w, w_zero_point, bias=None, requantize=None):
        """The exact sums as float32 or float64 (every value an integer); or, with `requantize`
        (multiplier, zero point, 8-bit dtype), possibly the requantized output of sums + bias."""
        channel_shape = (-1,) + (1,) * (w.ndim - 1) if w_zero_point is not None and w_zero_point.size > 1 else None
        x_max = span(x.dtype, None if x_zero_point is None else self.host(x_zero_point))
        w_max = span(w.dtype, None if w_zero_point is None else self.host(w_zero_point))
        dtype = np.float32 if math.prod(w.shape[1:]) * x_max * w_max < FLOAT32_EXACT else np.float64
        wc = self.weight.get(self.xp, w, w_zero_point, channel_shape, dtype)
        zero_point = np.zeros((), x.dtype) if x_zero_point is None else self.host(x_zero_point)
        return conv(self.xp, x, wc, bias, self.group, self.kernel_shape, self.strides, self.dilations, self.pads,
                    self.auto_pad, acc_dtype=dtype, x_zero_point=zero_point, requantize=requantize)


def _weights_times(xp, w, cols):
    """(N, M, pixels): per image and group, w (group, M/group, K) @ cols (N, group, K, pixels)."""
    n, group, _, pixels = cols.shape
    m = group * w.shape[1]
    y = xp.empty((n, m, pixels), cols.dtype)
    xp.matmul(w, cols, out=y.reshape(n, group, m // group, pixels))
    return y


def _depthwise(xp, x, w, k, strides, dilations, begin, end, out_shape):
    """One multiply-add per kernel tap over the whole tensor (no loop over channels)."""
    n, m, nd = x.shape[0], w.shape[0], len(k)
    tap_weights = w.reshape(m, -1)
    if nd == 2 and all(s == 1 for s in (strides or [1])):
        return _depthwise_wide(xp, x, tap_weights, k, dilations or [1, 1], begin, end, out_shape)
    padded = pad_into(x, begin, end, 0, "conv", xp)
    y = xp.empty((n, m) + tuple(out_shape), x.dtype)
    shape = (1, m) + (1,) * nd
    tmp = scratch("conv-tap", y.shape, x.dtype, xp)
    for i, (_, view) in enumerate(taps(padded, k, strides, dilations, out_shape)):
        if i == 0:
            xp.multiply(view, tap_weights[:, 0].reshape(shape), out=y)
        else:
            xp.multiply(view, tap_weights[:, i].reshape(shape), out=tmp)
            y += tmp
    return y


def _depthwise_wide(xp, x, tap_weights, k, dilations, begin, end, out_shape):
    """Stride-1 2-D depthwise on the padded width: every tap is one long contiguous run.

    Output rows are computed over the full padded width (the extra columns are dropped at the
    end), so a tap is a flat offset into the padded plane instead of a 2-D strided view.
    """
    n, m = x.shape[:2]
    (kh, kw), (dh, dw), (oh, ow) = k, dilations, out_shape
    padded = pad_into(x, begin, [end[0] + 1, end[1]], 0, "conv-wide", xp)  # a spare row keeps taps in bounds
    wp = padded.shape[3]
    flat = padded.reshape(n, m, padded.shape[2] * wp)   # not -1: a batch of 0 leaves -1 undefined
    length = oh * wp
    y = xp.empty((n, m, length), x.dtype)
    tmp = scratch("conv-wide-tap", y.shape, x.dtype, xp)
    for i in range(kh):
        for j in range(kw):
            tap, offset = i * kw + j, i * dh * wp + j * dw
            view = flat[:, :, offset:offset + length]
            if tap == 0:
                xp.multiply(view, tap_weights[:, 0, None], out=y)
            else:
                xp.multiply(view, tap_weights[:, tap, None], out=tmp)
                y += tmp
    return y.reshape(n, m, oh, wp)[:, :, :, :ow]


def _pixel_major(xp, cols, w):
    """cols (N, oh, ow, kh, kw, C) @ W^T (kh*kw*C, M), then one transposing copy to (N, M, pixels)."""
    n, oh, ow, kh, kw, c = cols.shape
    m = w.shape[0]
    w_t = w.transpose(0, 2, 3, 1).reshape(m, kh * kw * c).T  # matches cols' (kh, kw, C) order
    y_t = scratch("conv-out-nhwc", (n, oh * ow, m), cols.dtype, xp)
    xp.matmul(cols.reshape(n, oh * ow, kh * kw * c), w_t, out=y_t)
    y = xp.empty((n, m, oh * ow), cols.dtype)
    y[...] = y_t.transpose(0, 2, 1)
    return y
