"""Where: x where condition holds, y elsewhere, all three broadcast together."""
from .base import Elementwise


class Where_9(Elementwise):
    cuda = "in0 ? in1 : in2"

    def compute(self, condition, x, y, out=None):
        xp = self.xp
        if out is None:
            return xp.where(condition, x, y)
        if out is condition:  # the mask itself is overwritten: read it whole first
            xp.copyto(out, xp.where(condition, x, y))
        elif out is x:
            xp.copyto(out, y, where=xp.logical_not(condition))
        else:  # y first, then x over it where the condition holds: no temporaries
            xp.copyto(out, y)
            xp.copyto(out, x, where=condition)
        return out
