"""Log: natural logarithm of each element."""
from ._ufunc import Ufunc


class Log_6(Ufunc):
    ufunc, cuda = "log", "log(in0)"
