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


class PRelu_1(PRelu_7):
    """Opsets 1-6: a 1-D slope of more than one value holds one slope per channel (axis 1)."""

    attributes = {"consumed_inputs": None}  # opset 1's in-place hint: changes nothing
    cuda = None  # the channel reshape is not a CUDA expression

    def compute(self, x, slope, out=None):
        if slope.ndim == 1 and slope.size > 1 and x.ndim >= 2:
            slope = slope.reshape((slope.size,) + (1,) * (x.ndim - 2))
        return super().compute(x, slope, out=out)
