"""Convolution as GEMM, shared by Conv, ConvInteger and QLinearConv.

The plan is chosen per call from the shapes (cheap integer arithmetic):
- 1x1, stride 1, no pad: one matmul W(M, C) @ X(N, C, H*W) straight over NCHW, no copy;
- depthwise (C/group == 1 == M/group): one multiply-add per kernel tap over the whole tensor;
- otherwise im2col: the strided window view copied once into a per-thread buffer laid out
  (N, group, C/group * k, out pixels), then one batched matmul into the output.
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
    out_shape, begin, end = geometry(x.shape[2:], k, strides, dilations, pads, auto_pad)
    pixels = int(np.prod(out_shape))
    y = xp.empty((n, m, pixels), acc_dtype)
    if acc_dtype != x.dtype:
        x, w = x.astype(acc_dtype), w.astype(acc_dtype)
    if all(v == 1 for v in k) and all(s == 1 for s in (strides or [1])) and not any(begin + end):
        xp.matmul(w.reshape(group, m // group, c // group), x.reshape(n, group, c // group, pixels),
                  out=y.reshape(n, group, m // group, pixels))
    else:
        padded = pad_into(x, begin, end, 0, "conv", xp)
        if group == c == m and group > 1:
            y4 = y.reshape((n, m) + tuple(out_shape))
            tap_weights = w.reshape(m, -1)
            shape = (1, m) + (1,) * nd
            tmp = scratch("conv-tap", y4.shape, acc_dtype, xp)
            for i, (offset, view) in enumerate(taps(padded, k, strides, dilations, out_shape)):
                wk = tap_weights[:, i].reshape(shape)
                if i == 0:
                    xp.multiply(view, wk, out=y4)
                else:
                    xp.multiply(view, wk, out=tmp)
                    y4 += tmp
        else:
            kk = int(np.prod(k))
            cols = scratch("im2col", (n, group, c // group) + tuple(k) + tuple(out_shape), acc_dtype, xp)
            view = windows(padded, k, strides, dilations, out_shape)  # (N, C, *out, *k)
            axes = (0, 1) + tuple(range(2 + nd, 2 + 2 * nd)) + tuple(range(2, 2 + nd))
            cols.reshape((n, c) + tuple(k) + tuple(out_shape))[...] = view.transpose(axes)
            xp.matmul(w.reshape(group, m // group, (c // group) * kk),
                      cols.reshape(n, group, (c // group) * kk, pixels),
                      out=y.reshape(n, group, m // group, pixels))
    if bias is not None:
        y += bias.astype(acc_dtype, copy=False).reshape(1, m, 1)
    return y.reshape((n, m) + tuple(out_shape))
