"""Sub: a - b under broadcasting."""
from ._ufunc import Ufunc


class Sub_7(Ufunc):
    ufunc, cuda = "subtract", "in0 - in1"
