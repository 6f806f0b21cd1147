"""Or: logical a or b under broadcasting."""
from ._ufunc import Ufunc


class Or_7(Ufunc):
    ufunc, cuda = "logical_or", "in0 || in1"
