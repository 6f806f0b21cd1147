"""Separable resampling shared by Resize and Upsample: each axis is resized on its own.

For every resized axis, `axis_weights` maps output positions to source coordinates (the
coordinate_transformation_mode), then to a window of source indices and their weights
(nearest / linear / cubic, optionally antialiased). Integer up/down-sampling is periodic:
each output phase is a weighted sum of strided input slices written into a strided view of
the result. Other geometries gather each tap of the window with `take`. Edge handling
follows the onnx reference: windows are clamped to the edge (replicate), `exclude_outside`
zeroes and renormalizes out-of-range taps, and tf_crop_and_resize writes
`extrapolation_value` where the source lies outside the input. On the CPU, float32 windows of two
taps or more run as the compiled pass (native/resample.py), which a planned run's RESAMPLE op
(kernels/emit.py) shares, every tap kept (a zero weight times an infinity is a NaN there, as in
onnxruntime's sums).
"""
import functools
import math

import numpy as np
from onnx import numpy_helper

from rtd.errors import Code, RtdError

from ..native.resample import resample

MODES = ("nearest", "linear", "cubic")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
TRANSFORMS = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize")  # 11 on
TF_HALF_PIXEL = "tf_half_pixel_for_nn"  # opset 11 and 12 only
HALF_PIXEL_SYMMETRIC = "half_pixel_symmetric"  # opset 19 on
ASPECT_POLICIES = ("stretch", "not_larger", "not_smaller")


def source_coordinates(transform: str, out_size: int, in_size: int, scale: float, roi):
    """Where each output position samples the input, and which fall outside (crop mode only).

    align_corners and tf_crop_and_resize divide by the fractional output length scale * in_size,
    as the onnx reference and node tests do; onnxruntime uses the integer length, which agrees
    whenever scale * in_size is whole (as it is for sizes and for integer upsampling).
    """
    y = np.arange(out_size, dtype=np.float64)
    out_float = scale * in_size
    outside = None
    if transform == "align_corners":
        x = np.zeros(out_size) if out_float == 1 else y * (in_size - 1) / (out_float - 1)
    elif transform == "asymmetric":
        x = y / scale
    elif transform == "pytorch_half_pixel":
        x = (y + 0.5) / scale - 0.5 if out_size > 1 else np.zeros(out_size)
    elif transform == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif transform == TF_HALF_PIXEL:
        x = (y + 0.5) / scale
    elif transform == "half_pixel_symmetric":
        offset = in_size / 2 * (1 - out_size / out_float)
        x = offset + (y + 0.5) / scale - 0.5
    else:  # tf_crop_and_resize
        start, end = roi
        if out_float == 1:
            x = np.full(out_size, (start + end) / 2 * (in_size - 1))
        else:
            x = start * (in_size - 1) + y * (end - start) * (in_size - 1) / (out_float - 1)
        outside = (x < 0) | (x > in_size - 1)
    return x, outside


def _cubic(t, a: float):
    """The Keys cubic convolution kernel at distances t."""
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def _taps(mode: str, ratio, scale: float, cubic_a: float, antialias: bool):
    """Weights (out, n) of the n-tap window for fractional positions `ratio` in (0, 1]."""
    if mode == "linear" and not antialias:
        return np.stack([1 - ratio, ratio], axis=1)
    if mode == "cubic" and not antialias:
        return _cubic(np.stack([ratio + 1, ratio, 1 - ratio, 2 - ratio], axis=1), cubic_a)
    s = min(scale, 1.0)  # antialias widens the filter only when downsampling
    reach = 1 if mode == "linear" else 2
    start = math.floor(-reach / s) + 1
    offsets = np.arange(start, 2 - start if mode == "cubic" else start + 2 - 2 * start)
    t = (offsets[None, :] - ratio[:, None]) * s
    weights = np.clip(1 - np.abs(t), 0, 1) if mode == "linear" else _cubic(t, cubic_a)
    return weights / weights.sum(axis=1, keepdims=True)


def axis_weights(mode, x, in_size, scale, nearest_mode, cubic_a, exclude_outside, antialias):
    """(indices (out, n), weights (out, n)) for source coordinates x; indices may fall off the
    edges, where the input's edge value stands in (callers clamp or pad)."""
    if mode == "nearest":
        if nearest_mode == "floor_up_ceil_down":  # Resize-10 as onnxruntime (and so exporters) read it
            nearest_mode = "ceil" if scale < 1 else "floor"
        rounded = {"round_prefer_floor": np.ceil(x - 0.5), "round_prefer_ceil": np.floor(x + 0.5),
                   "floor": np.floor(x), "ceil": np.ceil(x)}[nearest_mode]
        index = np.where(x == np.floor(x), x, rounded).astype(np.int64)
        return index[:, None], np.ones((x.size, 1))
    base = np.floor(x)
    ratio = np.where(x == base, 1.0, x - base)  # an exact hit takes the left window, as the reference does
    weights = _taps(mode, ratio, scale, cubic_a, antialias)
    n = weights.shape[1]
    pad = math.ceil(n / 2)
    padded = x + pad
    p = np.floor(padded)
    frac = padded - p
    if n % 2 == 0:
        offset = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        offset = np.where(frac <= 0.5, -((n - 1) // 2), -((n - 1) // 2) + 1)
    index = (p + offset).astype(np.int64)[:, None] + np.arange(n)[None, :] - pad
    if exclude_outside:
        weights = np.where((index < 0) | (index >= in_size), 0.0, weights)
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    return index, weights


def _period(index, weights, in_size: int):
    """(P, S, offsets (P, n), weights (P, n)) when output P*m + p reads input S*m + offsets[p]
    with the same weights for every m (integer up/down-sampling away from align_corners), else None."""
    out_size, n = index.shape
    g = math.gcd(in_size, out_size)
    period, step = out_size // g, in_size // g
    if period > 8:  # one pass per phase: worth it only for small periods
        return None
    offsets = index.reshape(g, period, n) - (step * np.arange(g))[:, None, None]
    phases = weights.reshape(g, period, n)
    if (offsets != offsets[:1]).any() or not np.allclose(phases, phases[:1], rtol=0, atol=1e-12):
        return None
    return period, step, offsets[0], phases[0]


def _along_periodic(xp, x, axis: int, out_size: int, period: int, step: int, offsets, weights, work_dtype):
    """Each phase p of the output is a weighted sum of strided slices of the (edge-padded)
    input, written straight into a strided view of the result: no gathers, no index arrays."""
    in_size = x.shape[axis]
    g = out_size // period
    before = max(0, -int(offsets.min()))
    after = max(0, step * (g - 1) + int(offsets.max()) - (in_size - 1))
    if before or after:
        widths = [(0, 0)] * x.ndim
        widths[axis] = (before, after)
        x = xp.pad(x, widths, mode="edge")
    shape = list(x.shape)
    shape[axis] = out_size
    out = xp.empty(shape, dtype=x.dtype if weights.shape[1] == 1 else work_dtype)
    phased = out.reshape(shape[:axis] + [g, period] + shape[axis + 1:])
    lead = (slice(None),) * axis
    for p in range(period):
        dst = phased[lead + (slice(None), p)]
        first = True
        for o, w in zip(offsets[p], weights[p]):
            if w == 0:
                continue
            start = int(o) + before
            src = x[lead + (slice(start, start + step * (g - 1) + 1, step),)]
            if weights.shape[1] == 1:
                dst[...] = src
            elif first:
                xp.multiply(src, work_dtype(w), out=dst)
            else:
                dst += src * work_dtype(w)
            first = False
    return out


@functools.lru_cache(maxsize=256)
def axis_plan(mode, transform, in_size, out_size, scale, roi, nearest_mode, cubic_a, exclude_outside, antialias):
    """(index, weights, outside, periodic) for one axis, cached: a model resizes the same
    shapes on every run, and building the plan costs more Python than small maps take to copy."""
    coords, outside = source_coordinates(transform, out_size, in_size, scale, roi)
    index, weights = axis_weights(mode, coords, in_size, scale, nearest_mode, cubic_a, exclude_outside, antialias)
    for array in (index, weights, outside):
        if array is not None:
            array.flags.writeable = False  # shared by every run that hits the cache
    return index, weights, outside, _period(index, weights, in_size)


def _along(xp, x, axis: int, index, weights, periodic, work_dtype):
    """Resample one axis: float32 on the CPU by the compiled pass (native/resample.py: what a planned
    run's RESAMPLE op computes), else periodic slices when the geometry allows, else the sum over window
    taps of (gathered slab x tap weight). All are memory-bound passes; a dense (out x in)
    matrix would multiply mostly zeros."""
    if index.shape[1] > 1 and (y := resample(x, axis, index, weights)) is not None:
        return y
    if periodic is not None:
        return _along_periodic(xp, x, axis, index.shape[0], *periodic, work_dtype)
    index = np.clip(index, 0, x.shape[axis] - 1)
    out = None
    shape = [1] * x.ndim
    shape[axis] = index.shape[0]
    for tap in range(index.shape[1]):
        term = _gather(xp, x, axis, index[:, tap])
        if index.shape[1] > 1:
            term *= xp.asarray(weights[:, tap].astype(work_dtype).reshape(shape))
        out = term if out is None else xp.add(out, term, out=out)
    return out


def _gather(xp, x, axis: int, index):
    # On the last axis basic fancy indexing beats take (measured ~1.4x on NCHW maps).
    return x[..., xp.asarray(index)] if axis == x.ndim - 1 else xp.take(x, xp.asarray(index), axis=axis)


def output_geometry(shape, axes, scales, sizes, policy: str):
    """Per-axis (scale, out_size) for the resized axes, from scales or sizes (with aspect policy)."""
    if sizes is not None:
        sizes = [int(s) for s in sizes]
        ratios = [sizes[i] / shape[a] for i, a in enumerate(axes)]
        if policy != "stretch":
            common = min(ratios) if policy == "not_larger" else max(ratios)
            return [common] * len(axes), [int(common * shape[a] + 0.5) for a in axes]
        return ratios, sizes
    scales = [float(s) for s in scales]
    if any(s <= 0 for s in scales):
        raise RtdError(Code.E_INPUT_INVALID, f"Resize: scales must be positive, got {scales}")
    # float32 product as onnxruntime computes it: 10 * 1.8f is 18, not 17.99999...
    return scales, [int(np.float32(s) * np.float32(shape[a])) for s, a in zip(scales, axes)]


def passes(shape, *, mode, scales=None, sizes=None, roi=None, axes=None, transform="half_pixel",
           nearest_mode="round_prefer_floor", cubic_a=-0.75, exclude_outside=0, policy="stretch", antialias=0) -> list:
    """The one-axis passes resizing a tensor of `shape`, in the order they run: (axis, index, weights,
    outside, periodic) each, as axis_plan gives them."""
    axes = list(range(len(shape))) if axes is None else list(axes)
    count = len(sizes) if sizes is not None else len(scales)
    if count != len(axes):
        raise RtdError(Code.E_INPUT_INVALID, f"Resize: {count} scales/sizes for {len(axes)} axes")
    ratios, out_sizes = output_geometry(shape, axes, scales, sizes, policy)
    if roi is not None and roi.size == 0:
        roi = None
    if transform == "tf_crop_and_resize" and roi is None:
        raise RtdError(Code.E_INPUT_INVALID, "Resize: tf_crop_and_resize needs a roi")
    plans = []
    for i, (axis, scale, out_size) in enumerate(zip(axes, ratios, out_sizes)):
        axis_roi = None if roi is None else (float(roi[i]), float(roi[i + len(axes)]))
        if out_size == shape[axis] and math.isclose(scale, 1.0) and (axis_roi is None or axis_roi == (0.0, 1.0)):
            continue
        plans.append((axis, *axis_plan(mode, transform, shape[axis], out_size, scale, axis_roi, nearest_mode,
                                       cubic_a, bool(exclude_outside), bool(antialias))))
    # Strided last-axis writes are the slow pass: do that axis while the array is smallest
    # (first when it grows, last when it shrinks); the other axes then write whole rows.
    plans.sort(key=lambda plan: (plan[0] == len(shape) - 1) != (plan[1].shape[0] > shape[plan[0]]))
    return plans


def resize(xp, x, *, mode, extrapolation_value=0.0, **geometry):
    """x resized (`geometry`: passes' keywords)."""
    plans = passes(x.shape, mode=mode, **geometry)
    work_dtype = np.float64 if x.dtype == np.float64 else np.float32
    y = x if mode == "nearest" else x.astype(work_dtype, copy=False)
    for axis, index, weights, outside, periodic in plans:
        y = _along(xp, y, axis, index, weights, periodic, work_dtype)
        if outside is not None and outside.any():
            shape = [1] * y.ndim
            shape[axis] = index.shape[0]
            y = xp.where(xp.asarray(outside.reshape(shape)), y.dtype.type(extrapolation_value), y)
    if y.dtype == x.dtype:
        return y
    return xp.asarray(numpy_helper.saturate_cast(np.asarray(y), x.dtype)) if xp is np else y.astype(x.dtype)
