"""ThresholdedRelu: x where x > alpha, 0 elsewhere."""
from .base import Elementwise


class ThresholdedRelu_10(Elementwise):
    attributes = {"alpha": 1.0}

    @property
    def cuda(self):
        return f"in0 > {self.alpha!r} ? in0 : 0"

    def compute(self, x, out=None):
        return self.xp.multiply(x, self.xp.greater(x, self.alpha), out=out)
