"""Mean: the element-wise mean of N inputs under broadcasting."""
from ._variadic import Variadic


class Mean_6(Variadic):
    ufunc = "add"

    def compute(self, *inputs, out=None):
        result = super().compute(*inputs, out=out)
        result /= len(inputs)
        return result
