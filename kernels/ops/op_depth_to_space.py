"""DepthToSpace: move channel blocks into spatial blocks (DCR order; CRD from opset 11)."""
from rtd.errors import Code, RtdError

from .base import REQUIRED, Kernel


class DepthToSpace_1(Kernel):
    attributes = {"blocksize": REQUIRED}
    mode = "DCR"

    def run(self, x):
        b, c, h, w = x.shape
        bs = self.blocksize
        if self.mode == "DCR":
            y = x.reshape(b, bs, bs, c // (bs * bs), h, w).transpose(0, 3, 4, 1, 5, 2)
        else:
            y = x.reshape(b, c // (bs * bs), bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
        return (y.reshape(b, c // (bs * bs), h * bs, w * bs),)


class DepthToSpace_11(DepthToSpace_1):
    attributes = {"blocksize": REQUIRED, "mode": "DCR"}

    def setup(self):
        if self.mode not in ("DCR", "CRD"):
            raise RtdError(Code.E_MODEL_INVALID, f"DepthToSpace: mode {self.mode!r}")
