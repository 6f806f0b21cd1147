"""Convolution as GEMM, shared by Conv, ConvInteger and QLinearConv.

The plan is chosen per call from the shapes (cheap integer arithmetic):
- 1x1, stride 1, no pad: one matmul W(M, C) @ X(N, C, H*W) straight over NCHW, no copy;
- depthwise (C == group == M): one multiply-add per kernel tap over the whole tensor;
- few output channels, many pixels (e.g. ResNet's 64-channel 56x56 stage): "pixel-major" im2col
  from a channels-last copy of the input, cols (pixels, k*k*C) @ W^T (k*k*C, M) — OpenBLAS runs
  this shape faster than W @ cols when M is small — then one transposing copy to NCHW;
- otherwise channel-major im2col: cols (N, group, C/group*k*k, pixels), one batched W @ cols.
im2col and padded inputs live in per-thread scratch buffers reused across calls.
"""
import numpy as np

from rtd.errors import Code, RtdError

from ._window import geometry, pad_into, scratch, taps, windows


def conv(xp, x, w, bias, group, kernel_shape, strides, dilations, pads, auto_pad, acc_dtype=None):
    """ONNX Conv of x (N, C, *S) with w (M, C/group, *k); the result is in `acc_dtype` (default x's)."""
    n, c = x.shape[:2]
    m = w.shape[0]
    k = list(kernel_shape or w.shape[2:])
    nd = len(k)
    if x.ndim != nd + 2 or c != w.shape[1] * group or m % group:
        raise RtdError(Code.E_INPUT_INVALID, f"Conv: input {x.shape} does not fit weights {w.shape} with group {group}")
    acc_dtype = np.dtype(acc_dtype or x.dtype)
    if acc_dtype != x.dtype:
        x, w = x.astype(acc_dtype), w.astype(acc_dtype)
    out_shape, begin, end = geometry(x.shape[2:], k, strides, dilations, pads, auto_pad)
    pixels = int(np.prod(out_shape))
    pointwise = all(v == 1 for v in k) and all(s == 1 for s in (strides or [1])) and not any(begin + end)
    if pointwise:
        y = xp.empty((n, m, pixels), acc_dtype)
        xp.matmul(w.reshape(group, m // group, c // group), x.reshape(n, group, c // group, pixels),
                  out=y.reshape(n, group, m // group, pixels))
    elif group == c == m and group > 1:
        y = _depthwise(xp, x, w, k, strides, dilations, begin, end, out_shape)
    elif group == 1 and nd == 2 and c >= 16 and pixels >= 8 * m:
        y = _pixel_major(xp, x, w, k, strides, dilations, begin, end, out_shape)
    else:
        y = _channel_major(xp, x, w, group, k, strides, dilations, begin, end, out_shape)
    y = y.reshape((n, m, pixels))
    if bias is not None:
        y += bias.astype(acc_dtype, copy=False).reshape(1, m, 1)
    return y.reshape((n, m) + tuple(out_shape))


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
    flat = padded.reshape(n, m, -1)
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


def _channel_major(xp, x, w, group, k, strides, dilations, begin, end, out_shape):
    n, c = x.shape[:2]
    m, nd = w.shape[0], len(k)
    kk, pixels = int(np.prod(k)), int(np.prod(out_shape))
    padded = pad_into(x, begin, end, 0, "conv", xp)
    cols = scratch("im2col", (n, c) + tuple(k) + tuple(out_shape), x.dtype, xp)
    view = windows(xp, padded, k, strides, dilations, out_shape)  # (N, C, *out, *k)
    cols[...] = view.transpose((0, 1) + tuple(range(2 + nd, 2 + 2 * nd)) + tuple(range(2, 2 + nd)))
    y = xp.empty((n, m, pixels), x.dtype)
    xp.matmul(w.reshape(group, m // group, (c // group) * kk), cols.reshape(n, group, (c // group) * kk, pixels),
              out=y.reshape(n, group, m // group, pixels))
    return y


def _pixel_major(xp, x, w, k, strides, dilations, begin, end, out_shape):
    n, c = x.shape[:2]
    m = w.shape[0]
    (kh, kw), (oh, ow) = k, out_shape
    sh, sw = strides or (1, 1)
    dh, dw = dilations or (1, 1)
    hp, wp = x.shape[2] + begin[0] + end[0], x.shape[3] + begin[1] + end[1]
    padded = scratch(("conv-nhwc", tuple(begin)), (n, hp, wp, c), x.dtype, xp, fill=0)
    padded[:, begin[0]:begin[0] + x.shape[2], begin[1]:begin[1] + x.shape[3]] = x.transpose(0, 2, 3, 1)
    span = ((kh - 1) * dh + 1, (kw - 1) * dw + 1)
    view = xp.lib.stride_tricks.sliding_window_view(padded, span, axis=(1, 2))  # (N, H', W', C, span_h, span_w)
    view = view[:, :(oh - 1) * sh + 1:sh, :(ow - 1) * sw + 1:sw, :, ::dh, ::dw]
    cols = scratch("im2col-nhwc", (n, oh, ow, kh, kw, c), x.dtype, xp)
    cols[...] = view.transpose(0, 1, 2, 4, 5, 3)
    w_t = w.transpose(0, 2, 3, 1).reshape(m, kh * kw * c).T  # matches cols' (kh, kw, C) order
    y_t = scratch("conv-out-nhwc", (n, oh * ow, m), x.dtype, xp)
    xp.matmul(cols.reshape(n, oh * ow, kh * kw * c), w_t, out=y_t)
    y = xp.empty((n, m, oh * ow), x.dtype)
    y[...] = y_t.transpose(0, 2, 1)
    return y
