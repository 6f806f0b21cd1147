"""Clip: each element limited to [min, max]; NaN stays NaN; min > max gives max everywhere.

An absent limit is the type's lowest/highest finite value (numeric_limits, as the spec says),
so infinities in float inputs are clamped to the finite range.

Clip-6 takes the limits as float attributes; from Clip-11 they are optional 0-d inputs of the
input's type.
"""
from .base import Elementwise


def _clip(xp, x, low, high, out):
    if x.dtype.kind == "f":
        info = xp.finfo(x.dtype)
        low, high = info.min if low is None else low, info.max if high is None else high
    if low is None and high is None:
        if out is None:
            return x.copy()
        xp.copyto(out, x)
        return out
    if low is None:
        return xp.minimum(x, high, out=out)
    if high is None:
        return xp.maximum(x, low, out=out)
    return xp.clip(x, low, high, out=out)  # maximum then minimum: min > max yields max


class Clip_6(Elementwise):
    attributes = {"min": -3.4028234663852886e38, "max": 3.4028234663852886e38}

    @property
    def cuda(self):
        return f"fmin(fmax(in0, {self.min!r}), {self.max!r})"

    def compute(self, x, out=None):
        return _clip(self.xp, x, self.min, self.max, out)


class Clip_11(Elementwise):
    cuda = "in0 < in1 ? in1 : (in0 > in2 ? in2 : in0)"

    def compute(self, x, low=None, high=None, out=None):
        return _clip(self.xp, x, low, high, out)
