"""Pad: constant/reflect/edge padding (wrap from opset 19); negative pads crop.

Versions: 2 takes pads and value as attributes, 11 as inputs, 18 adds an `axes` input,
19 adds the wrap mode.
"""
import numpy as np

from rtd.errors import Code, RtdError

from ._axes import normalize_axes
from .base import REQUIRED, Kernel


def pad(xp, x, pads, value, mode: str, axes=None):
    """`pads` is [begin_0, begin_1, ..., end_0, end_1, ...] over `axes` (default: all)."""
    axes = range(x.ndim) if axes is None else axes
    pads = np.asarray(pads, dtype=np.int64).reshape(-1)
    if pads.size != 2 * len(axes):
        raise RtdError(Code.E_INPUT_INVALID, f"Pad: {pads.size} pads for {len(axes)} axes")
    widths = [[0, 0] for _ in range(x.ndim)]
    crop = [slice(None)] * x.ndim
    for i, axis in enumerate(axes):
        begin, end = int(pads[i]), int(pads[i + len(axes)])
        widths[axis] = [max(begin, 0), max(end, 0)]
        crop[axis] = slice(max(-begin, 0), x.shape[axis] - max(-end, 0))
    x = x[tuple(crop)]
    if mode == "constant":
        return xp.pad(x, widths, mode="constant", constant_values=value)
    return xp.pad(x, widths, mode=mode)  # ONNX's reflect/edge/wrap are NumPy's


class _Pad(Kernel):
    modes = ("constant", "reflect", "edge")

    def setup(self):
        if self.mode not in self.modes:
            raise RtdError(Code.E_OP_UNSUPPORTED, f"Pad-{self.since}: mode {self.mode!r}")


class Pad_2(_Pad):
    attributes = {"mode": "constant", "pads": REQUIRED, "value": 0.0}

    def run(self, x):
        return (pad(self.xp, x, self.pads, self.value, self.mode),)


class Pad_11(_Pad):
    attributes = {"mode": "constant"}

    def run(self, x, pads, constant_value=None):
        return self.pad_axes(x, pads, constant_value, None)

    def pad_axes(self, x, pads, constant_value, axes):
        value = 0 if constant_value is None else self.host(self.xp.asarray(constant_value)).reshape(-1)[0]
        if axes is not None:
            axes = normalize_axes(self.host(axes), x.ndim, "Pad")
        return (pad(self.xp, x, self.host(pads), value, self.mode, axes),)


class Pad_18(Pad_11):
    def run(self, x, pads, constant_value=None, axes=None):
        return self.pad_axes(x, pads, constant_value, axes)


class Pad_19(Pad_18):
    modes = ("constant", "reflect", "edge", "wrap")
