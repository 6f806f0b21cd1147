"""ThresholdedRelu: x where x > alpha, 0 elsewhere."""
from .base import Elementwise


class ThresholdedRelu_10(Elementwise):
    attributes = {"alpha": 1.0}

    @property
    def cuda(self):
        return f"in0 > {self.alpha!r} ? in0 : 0"

    def compute(self, x, out=None):
        xp = self.xp
        drop = xp.logical_not(xp.greater(x, self.alpha))  # NaN is not above alpha: it becomes 0 too
        if out is None:
            return xp.where(drop, x.dtype.type(0), x)
        if out is not x:
            xp.copyto(out, x)
        xp.copyto(out, 0, where=drop)
        return out
