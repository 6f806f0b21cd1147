"""HardSwish: x * max(0, min(1, x / 6 + 1/2))."""
from .base import Elementwise


class HardSwish_14(Elementwise):
    cuda = "in0 * fmin(fmax(in0 / 6.0 + 0.5, 0.0), 1.0)"

    def compute(self, x, out=None):
        gate = self.xp.multiply(x, x.dtype.type(1 / 6))  # typed: bfloat16 * float is float32
        gate += 0.5
        self.xp.clip(gate, 0, 1, out=gate)
        return self.xp.multiply(x, gate, out=out)
