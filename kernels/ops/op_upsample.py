"""Upsample (deprecated at 10): Resize-10 under its old name (asymmetric coordinates).

Version 7 takes the scales as an attribute, 9 as an input.
"""
from rtd.errors import Code, RtdError

from ._resize import resize
from .base import REQUIRED, Kernel


class _Upsample(Kernel):
    def setup(self):
        if self.mode not in ("nearest", "linear"):
            raise RtdError(Code.E_OP_UNSUPPORTED, f"Upsample: mode {self.mode!r}")

    def upsample(self, x, scales):
        return (resize(self.xp, x, mode=self.mode, scales=list(scales), transform="asymmetric",
                       nearest_mode="floor_up_ceil_down"),)


class Upsample_7(_Upsample):
    attributes = {"mode": "nearest", "scales": REQUIRED}

    def run(self, x):
        return self.upsample(x, self.scales)


class Upsample_9(_Upsample):
    attributes = {"mode": "nearest"}

    def run(self, x, scales):
        return self.upsample(x, self.host(scales).tolist())
