"""IsInf: true where an element is +inf (detect_positive) or -inf (detect_negative)."""
from .base import Elementwise


class IsInf_10(Elementwise):
    attributes = {"detect_negative": 1, "detect_positive": 1}

    @property
    def cuda(self):
        if self.detect_positive and self.detect_negative:
            return "isinf(in0)"
        if self.detect_positive or self.detect_negative:
            return "in0 == INFINITY" if self.detect_positive else "in0 == -INFINITY"
        return "false"

    def compute(self, x, out=None):
        xp = self.xp
        if self.detect_positive and self.detect_negative:
            return xp.isinf(x, out=out)
        if self.detect_positive or self.detect_negative:
            return xp.equal(x, float("inf") if self.detect_positive else float("-inf"), out=out)
        if out is None:
            return xp.zeros(x.shape, dtype=bool)
        out.fill(False)
        return out
