"""Windowed pooling shared by MaxPool, AveragePool and LpPool.

Max and sum are associative, so a k x k pool reduces one axis at a time (k + k whole-array
`maximum`/`add` calls on strided views), never a reduction over a window view. Averages
divide by a count map built the same way from a 0/1 mask, so pads and ceil-mode overhang
are counted exactly as ONNX specifies.
"""
import numpy as np

from ..native.pool import average_pool2d
from ._window import geometry, pad_into, separable, taps

POOL_ATTRIBUTES = {"auto_pad": "NOTSET", "kernel_shape": None, "pads": None, "strides": None}


def lowest(dtype):
    return -np.inf if np.dtype(dtype).kind == "f" else np.iinfo(dtype).min


def max_pool(xp, x, kernel, strides, dilations, pads, auto_pad, ceil_mode, storage_order, want_indices):
    """(y, indices or None); indices are flat positions in x (row- or column-major per storage_order)."""
    out_shape, begin, end = geometry(x.shape[2:], kernel, strides, dilations, pads, auto_pad, ceil_mode)
    padded = pad_into(x, begin, end, lowest(x.dtype), "maxpool", xp)
    y = separable(xp, padded, kernel, strides, dilations, out_shape, xp.maximum)
    if not want_indices:
        return y, None
    tap_views = list(taps(padded, kernel, strides, dilations, out_shape))
    best = xp.zeros(y.shape, np.int64)
    for i in range(len(tap_views) - 1, -1, -1):  # reversed: the first maximal tap wins, like ONNX
        xp.copyto(best, i, where=tap_views[i][1] == y)
    nd = len(kernel)
    dilations = dilations or [1] * nd
    strides = strides or [1] * nd
    offsets = np.array(list(np.ndindex(*kernel)), np.int64)  # tap -> kernel position
    spatial = x.shape[2:]
    flat = xp.zeros(y.shape, np.int64)
    order = range(nd) if storage_order == 0 else range(nd - 1, -1, -1)
    for axis in order:
        grid = (xp.arange(out_shape[axis]) * strides[axis] - begin[axis]).reshape(
            (1, 1) + tuple(-1 if a == axis else 1 for a in range(nd)))
        coord = grid + xp.asarray(offsets[:, axis] * dilations[axis])[best]
        flat = flat * spatial[axis] + coord
    plane = int(np.prod(spatial))
    channel = xp.arange(x.shape[0] * x.shape[1]).reshape(x.shape[:2] + (1,) * nd) * plane
    return y, flat + channel


def counted_pads(begin, end, pads, auto_pad, count_include_pad):
    """(begin, end): the pads an average counts in its divisor, per spatial axis: none, or with count_include_pad
    the explicit (or auto_pad's) pads, never the ceil-mode overhang geometry() added to end."""
    nd = len(begin)
    if not count_include_pad:
        return [0] * nd, [0] * nd
    return list(begin), list(pads or [0] * 2 * nd)[nd:] if auto_pad in ("NOTSET", "") else list(end)


def sum_pool(xp, x, kernel, strides, dilations, pads, auto_pad, ceil_mode, count_include_pad, p=None):
    """Average (p None) or Lp pooling; averages count only real cells (plus explicit pads if asked). A float32
    NumPy average over 2-D windows runs pool.c's kernel, as a compiled plan's does."""
    out_shape, begin, end = geometry(x.shape[2:], kernel, strides, dilations, pads, auto_pad, ceil_mode)
    counted_begin, counted_end = counted_pads(begin, end, pads, auto_pad, count_include_pad)
    if p is None and xp is np:
        y = average_pool2d(x, kernel, strides, dilations, begin, out_shape, counted_begin, counted_end)
        if y is not None:
            return y
    padded = pad_into(x, begin, end, 0, "sumpool", xp)
    if p is not None:
        padded = xp.abs(padded) if p == 1 else xp.abs(padded) ** p
    y = separable(xp, padded, kernel, strides, dilations, out_shape, xp.add)
    if p is not None:
        return y if p == 1 else y ** (1.0 / p)
    if count_include_pad and list(end) == counted_end:
        y /= y.dtype.type(np.prod(kernel))
        return y
    spatial = x.shape[2:]
    mask = np.zeros((1, 1) + tuple(b + s + e for b, s, e in zip(begin, spatial, end)), x.dtype)
    inner = tuple(slice(b - cb, b + s + ce) for b, s, cb, ce in zip(begin, spatial, counted_begin, counted_end))
    mask[(slice(None), slice(None)) + inner] = 1
    count = separable(np, mask, kernel, strides, dilations, out_shape, np.add)
    y /= xp.asarray(np.maximum(count, 1))
    return y
