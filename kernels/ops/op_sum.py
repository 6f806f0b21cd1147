"""Sum: the element-wise sum of N inputs under broadcasting."""
from ._variadic import Variadic


class Sum_6(Variadic):
    ufunc = "add"
