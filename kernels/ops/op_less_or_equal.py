"""LessOrEqual: a <= b under broadcasting."""
from ._ufunc import Ufunc


class LessOrEqual_12(Ufunc):
    ufunc, cuda = "less_equal", "in0 <= in1"
