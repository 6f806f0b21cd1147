"""SpaceToDepth: move spatial blocks of `blocksize` into channels; DCR order (CRD too from 28)."""
from rtd.errors import Code, RtdError

from .base import REQUIRED, Kernel


class SpaceToDepth_1(Kernel):
    attributes = {"blocksize": REQUIRED}
    mode = "DCR"

    def run(self, x):
        b, c, h, w = x.shape
        bs = self.blocksize
        y = x.reshape(b, c, h // bs, bs, w // bs, bs)
        y = y.transpose(0, 3, 5, 1, 2, 4) if self.mode == "DCR" else y.transpose(0, 1, 3, 5, 2, 4)
        return (y.reshape(b, c * bs * bs, h // bs, w // bs),)


class SpaceToDepth_28(SpaceToDepth_1):
    attributes = {"blocksize": REQUIRED, "mode": "DCR"}

    def setup(self):
        if self.mode not in ("DCR", "CRD"):
            raise RtdError(Code.E_MODEL_INVALID, f"SpaceToDepth: mode {self.mode!r}")
