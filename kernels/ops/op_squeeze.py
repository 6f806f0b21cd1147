"""Squeeze: drop size-1 axes (the listed ones, or all); axes moved from attribute to input at 13.

Returns a view: the fuser writes in place only into buffers it allocated.
"""
from rtd.errors import Code, RtdError

from ._axes import normalize_axes
from .base import Kernel


def _squeeze(xp, x, axes):
    if axes is None:
        return xp.squeeze(x)
    axes = normalize_axes(axes, x.ndim, "Squeeze")
    if any(x.shape[a] != 1 for a in axes):
        raise RtdError(Code.E_INPUT_INVALID, f"Squeeze: axes {list(axes)} of shape {x.shape} are not all 1")
    return xp.squeeze(x, axis=axes)


class Squeeze_1(Kernel):
    attributes = {"axes": None}

    def run(self, x):
        return (_squeeze(self.xp, x, self.axes),)


class Squeeze_13(Kernel):
    def run(self, x, axes=None):
        return (_squeeze(self.xp, x, self.host(axes)),)
