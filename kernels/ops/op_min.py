"""Min: the element-wise minimum of N inputs under broadcasting; NaN propagates."""
from ._variadic import Variadic


class Min_6(Variadic):
    ufunc = "minimum"
