"""And: logical a and b under broadcasting."""
from ._ufunc import Ufunc


class And_7(Ufunc):
    ufunc, cuda = "logical_and", "in0 && in1"
