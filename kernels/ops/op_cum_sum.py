"""CumSum: running sums along an axis (an input), optionally exclusive and/or reversed."""
from ._cumulative import Cumulative


class CumSum_11(Cumulative):
    ufunc = "add"
