"""GreaterOrEqual: a >= b under broadcasting."""
from ._ufunc import Ufunc


class GreaterOrEqual_12(Ufunc):
    ufunc, cuda = "greater_equal", "in0 >= in1"
