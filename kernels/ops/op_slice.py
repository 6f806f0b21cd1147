"""Slice: starts/ends/axes/steps inputs from opset 10 on, attributes before; clamped per the spec. Returns a view."""
from rtd.errors import Code, RtdError

from ._axes import normalize_axes
from .base import REQUIRED, Kernel


def _bounds(start: int, end: int, step: int, dim: int) -> slice:
    """One axis's ONNX slice as a Python slice (ONNX clamps; Python would wrap -1 around)."""
    if step == 0:
        raise RtdError(Code.E_INPUT_INVALID, "Slice: a step of 0")
    start, end = (v + dim if v < 0 else v for v in (start, end))
    if step > 0:
        return slice(min(max(start, 0), dim), min(max(end, 0), dim), step)
    start, end = min(max(start, -1), dim - 1), min(max(end, -1), dim - 1)
    if start < 0:
        return slice(0, 0)
    return slice(start, None if end < 0 else end, step)


class Slice_10(Kernel):
    def run(self, x, starts, ends, axes=None, steps=None):
        starts, ends = self.host(starts).tolist(), self.host(ends).tolist()
        axes = range(len(starts)) if axes is None else normalize_axes(self.host(axes), x.ndim, "Slice")
        steps = [1] * len(starts) if steps is None else self.host(steps).tolist()
        index = [slice(None)] * x.ndim
        for axis, start, end, step in zip(axes, starts, ends, steps):
            index[axis] = _bounds(start, end, step, x.shape[axis])
        return (x[tuple(index)],)


class Slice_1(Kernel):
    """Opsets 1-9: starts, ends and axes are attributes; the step is 1."""

    attributes = {"starts": REQUIRED, "ends": REQUIRED, "axes": None}

    def run(self, x):
        axes = range(len(self.starts)) if self.axes is None else normalize_axes(self.axes, x.ndim, "Slice")
        index = [slice(None)] * x.ndim
        for axis, start, end in zip(axes, self.starts, self.ends):
            index[axis] = _bounds(start, end, 1, x.shape[axis])
        return (x[tuple(index)],)
