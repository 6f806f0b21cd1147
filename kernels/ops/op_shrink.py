"""Shrink: x - bias where x > lambd, x + bias where x < -lambd, 0 elsewhere."""
from .base import Elementwise


class Shrink_9(Elementwise):
    attributes = {"bias": 0.0, "lambd": 0.5}

    @property
    def cuda(self):
        b, lam = self.bias, self.lambd
        return f"in0 < -{lam!r} ? in0 + {b!r} : (in0 > {lam!r} ? in0 - {b!r} : 0)"

    def compute(self, x, out=None):
        xp = self.xp
        below, above = xp.less(x, -self.lambd), xp.greater(x, self.lambd)
        # shrink in float64 then cast: integer inputs with a fractional bias round like the spec's
        shifted = xp.where(below, x + self.bias, xp.where(above, x - self.bias, 0))
        if out is None:
            return shifted.astype(x.dtype, copy=False)
        xp.copyto(out, shifted, casting="unsafe")
        return out
