"""Max: the element-wise maximum of N inputs under broadcasting; NaN propagates."""
from ._variadic import Variadic


class Max_6(Variadic):
    ufunc = "maximum"
