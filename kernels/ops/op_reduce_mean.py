"""ReduceMean: the mean over the given axes (axes as an input from opset 18)."""
import math

from ._reduce import AxesFromAttribute, AxesFromInput, in_type_of, sum_over


class ReduceMean_18(AxesFromInput):
    def reduce(self, x, axes, keepdims):
        if x.dtype.kind == "f" and x.size:  # a sum and one division of the (small) result
            count = math.prod(x.shape[a] for a in (range(x.ndim) if axes is None else axes))
            total = self.xp.asarray(sum_over(self.xp, x, axes, keepdims))
            return self.xp.divide(total, x.dtype.type(count), out=total)
        return in_type_of(x, self.xp.mean(x, axis=axes, keepdims=keepdims))


class ReduceMean_1(AxesFromAttribute, ReduceMean_18):
    pass
