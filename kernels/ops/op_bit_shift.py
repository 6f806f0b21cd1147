"""BitShift: x << y or x >> y (direction "LEFT" / "RIGHT") over unsigned integers."""
from rtd.errors import Code, RtdError

from .base import REQUIRED, Elementwise


class BitShift_11(Elementwise):
    attributes = {"direction": REQUIRED}

    def setup(self) -> None:
        if self.direction not in ("LEFT", "RIGHT"):
            raise RtdError(Code.E_MODEL_INVALID, f"BitShift: direction {self.direction!r} is not LEFT or RIGHT")
        self.cuda = "in0 << in1" if self.direction == "LEFT" else "in0 >> in1"
        self._shift = self.xp.left_shift if self.direction == "LEFT" else self.xp.right_shift

    def compute(self, x, y, out=None):
        return self._shift(x, y, out=out)
