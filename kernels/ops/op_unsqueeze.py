"""Unsqueeze: insert size-1 axes at positions of the output; axes moved to an input at 13.

Returns a view: the fuser writes in place only into buffers it allocated.
"""
from ._axes import normalize_axes
from .base import REQUIRED, Kernel


def _unsqueeze(x, axes):
    axes = normalize_axes(axes, x.ndim + len(axes), "Unsqueeze")
    shape = list(x.shape)
    for axis in sorted(axes):
        shape.insert(axis, 1)
    return x.reshape(shape)


class Unsqueeze_1(Kernel):
    attributes = {"axes": REQUIRED}

    def run(self, x):
        return (_unsqueeze(x, list(self.axes)),)


class Unsqueeze_13(Kernel):
    def run(self, x, axes):
        return (_unsqueeze(x, self.host(axes).reshape(-1).tolist()),)
