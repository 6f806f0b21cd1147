"""LpNormalization: x divided by its L1 or L2 norm along `axis` (zero norms give zeros)."""
from rtd.errors import Code, RtdError

from .base import Kernel


class LpNormalization_1(Kernel):
    attributes = {"axis": -1, "p": 2}

    def setup(self):
        if self.p not in (1, 2):
            raise RtdError(Code.E_MODEL_INVALID, f"LpNormalization: p must be 1 or 2, got {self.p}")

    def run(self, x):
        xp = self.xp
        if self.p == 1:
            norm = xp.abs(x).sum(axis=self.axis, keepdims=True)
        else:
            norm = xp.sqrt(xp.square(x).sum(axis=self.axis, keepdims=True))
        safe = xp.where(norm == 0, x.dtype.type(1), norm)
        return (xp.where(norm == 0, x.dtype.type(0), x / safe).astype(x.dtype, copy=False),)
