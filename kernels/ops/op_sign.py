"""Sign: -1, 0 or 1 by the sign of each element."""
from ._ufunc import Ufunc


class Sign_9(Ufunc):
    ufunc, cuda = "sign", "(in0 > 0) - (in0 < 0)"
