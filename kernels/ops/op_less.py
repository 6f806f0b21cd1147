"""Less: a < b under broadcasting."""
from ._ufunc import Ufunc


class Less_7(Ufunc):
    ufunc, cuda = "less", "in0 < in1"
