"""Sliding-window geometry shared by convolution and pooling: output sizes, pads, strided views.

Spatial attributes follow ONNX: `pads` is [x1_begin, x2_begin, ..., x1_end, x2_end, ...];
`auto_pad` SAME_UPPER puts the odd pad at the end, SAME_LOWER at the beginning.
A per-thread scratch cache holds padded inputs and im2col buffers, so a kernel instance
shared by several `run` threads never shares a buffer between them.
"""
import functools
import math
import threading

import numpy as np

from rtd.errors import Code, RtdError


def geometry(in_shape, kernel, strides, dilations, pads, auto_pad="NOTSET", ceil_mode=0):
    """(out_shape, pads_begin, pads_end) for a window of `kernel` sliding over `in_shape`.

    With ceil_mode the last window may hang past the explicit end pad; that overhang is
    added to pads_end (callers pad it with the neutral value and never count it).
    Worked out once per distinct geometry: pooling asks again on every call.
    """
    out, begin, end = _geometry(tuple(in_shape), tuple(kernel), _tuple(strides), _tuple(dilations), _tuple(pads),
                                auto_pad, ceil_mode)
    return list(out), list(begin), list(end)


def _tuple(values):
    return None if values is None else tuple(values)


@functools.lru_cache(maxsize=1024)
def _geometry(in_shape, kernel, strides, dilations, pads, auto_pad, ceil_mode):
    nd = len(in_shape)
    strides = list(strides or [1] * nd)
    dilations = list(dilations or [1] * nd)
    span = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = [math.ceil(i / s) for i, s in zip(in_shape, strides)]
        total = [max(0, (o - 1) * s + w - i) for o, s, w, i in zip(out, strides, span, in_shape)]
        small = [t // 2 for t in total]
        big = [t - t // 2 for t in total]
        begin, end = (small, big) if auto_pad == "SAME_UPPER" else (big, small)
        return out, begin, end
    if auto_pad == "VALID":
        begin = end = [0] * nd
    elif auto_pad in ("NOTSET", ""):
        pads = list(pads or [0] * 2 * nd)
        begin, end = pads[:nd], pads[nd:]
    else:
        raise RtdError(Code.E_MODEL_INVALID, f"auto_pad {auto_pad!r} is not NOTSET, SAME_UPPER, SAME_LOWER or VALID")
    out = []
    for i, s, w, b, e in zip(in_shape, strides, span, begin, end):
        n = (i + b + e - w) / s + 1
        o = math.ceil(n) if ceil_mode else math.floor(n)
        if ceil_mode and (o - 1) * s >= i + b:  # the last window must start inside input or begin pad
            o -= 1
        out.append(max(o, 0))
    end = [max(e, (o - 1) * s + w - i - b) for o, s, w, i, b, e in zip(out, strides, span, in_shape, begin, end)]
    return out, list(begin), end


def windows(xp, padded, kernel, strides, dilations, out_shape):
    """A view (N, C, *out, *kernel) of every window of `padded` (N, C, *spatial); no copy."""
    nd = len(kernel)
    dilations = list(dilations or [1] * nd)
    strides = list(strides or [1] * nd)
    span = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    view = xp.lib.stride_tricks.sliding_window_view(padded, span, axis=tuple(range(2, 2 + nd)))
    index = [slice(None), slice(None)]
    index += [slice(0, (o - 1) * s + 1, s) for o, s in zip(out_shape, strides)]
    index += [slice(None, None, d) for d in dilations]
    return view[tuple(index)]


def taps(padded, kernel, strides, dilations, out_shape):
    """Yield (kernel offset, strided view (N, C, *out)) once per kernel tap: k*k vectorized slices."""
    nd = len(kernel)
    dilations = list(dilations or [1] * nd)
    strides = list(strides or [1] * nd)
    for offset in np.ndindex(*kernel):
        index = [slice(None), slice(None)]
        for t, d, s, o in zip(offset, dilations, strides, out_shape):
            start = t * d
            index.append(slice(start, start + (o - 1) * s + 1, s))
        yield offset, padded[tuple(index)]


def separable(xp, padded, kernel, strides, dilations, out_shape, combine):
    """Reduce every window with the associative ufunc `combine`, one spatial axis at a time.

    A k x k window costs k + k whole-array ops on shrinking arrays instead of k * k; the first
    two taps of an axis combine into a new array, so no tap is copied. The result is always a
    new array (callers scale it in place), never a view of `padded`.
    """
    nd = len(kernel)
    dilations = dilations or [1] * nd
    strides = strides or [1] * nd
    y, fresh = padded, False
    for axis, (k, d, s, o) in enumerate(zip(kernel, dilations, strides, out_shape)):
        before = (slice(None),) * (axis + 2)
        parts = [y[before + (slice(t * d, t * d + (o - 1) * s + 1, s),)] for t in range(k)]
        if k == 1:
            y = parts[0]
            continue
        y = combine(parts[0], parts[1])
        for part in parts[2:]:
            combine(y, part, out=y)
        fresh = True
    return y if fresh else y.copy()


_local = threading.local()
_SCRATCH_LIMIT = 64  # buffers kept per thread; dynamic shapes would otherwise grow the cache forever


def per_thread(key, build):
    """This thread's object for `key`, made by `build()` on first use and reused after."""
    cache = getattr(_local, "buffers", None)
    if cache is None:
        cache = _local.buffers = {}
    value = cache.get(key)
    if value is None:
        if len(cache) >= _SCRATCH_LIMIT:
            cache.clear()  # callers hold what they already took; only reuse is lost
        value = cache[key] = build()
    return value


def scratch(tag, shape, dtype, xp=np, fill=None):
    """A per-thread buffer reused across calls; `fill` (if given) is written once, when it is made."""
    def build():
        buf = xp.empty(shape, dtype)
        if fill is not None:
            buf.fill(fill)
        return buf
    return per_thread((tag, tuple(shape), np.dtype(dtype), xp.__name__), build)


def pad_into(x, begin, end, fill, tag, xp=np):
    """`x` (N, C, *spatial) padded with `fill`; borders of the per-thread buffer are set once."""
    if not any(begin) and not any(end):
        return x
    shape = x.shape[:2] + tuple(i + b + e for i, b, e in zip(x.shape[2:], begin, end))
    # the fill and where the interior sits (begin and end: the same padded shape can hold a
    # wider interior with a smaller end pad) decide which cells stay border across calls
    buf = scratch((tag, float(fill), tuple(begin), tuple(end)), shape, x.dtype, xp, fill=fill)
    inner = (slice(None), slice(None)) + tuple(slice(b, b + i) for b, i in zip(begin, x.shape[2:]))
    buf[inner] = x
    return buf
