"""Greater: a > b under broadcasting."""
from ._ufunc import Ufunc


class Greater_7(Ufunc):
    ufunc, cuda = "greater", "in0 > in1"
