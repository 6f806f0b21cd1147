"""Equal: a == b under broadcasting (numbers, bools and strings)."""
from ._ufunc import Ufunc


class Equal_7(Ufunc):
    ufunc, cuda = "equal", "in0 == in1"
