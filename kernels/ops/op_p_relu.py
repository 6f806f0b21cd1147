"""PRelu: x where x >= 0, slope * x elsewhere; slope broadcasts onto x."""
from .base import Elementwise


class PRelu_7(Elementwise):
    cuda = "in0 >= 0 ? in0 : in1 * in0"

    def compute(self, x, slope, out=None):
        negative = self.xp.minimum(x, 0)  # taken first: `out` may alias `x`
        negative *= slope
        result = self.xp.maximum(x, 0, out=out)
        result += negative
        return result
