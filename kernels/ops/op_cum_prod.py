"""CumProd: running products along an axis (an input), optionally exclusive and/or reversed."""
from ._cumulative import Cumulative


class CumProd_26(Cumulative):
    ufunc = "multiply"
