"""Sin: sine of each element."""
from ._ufunc import Ufunc


class Sin_7(Ufunc):
    ufunc, cuda = "sin", "sin(in0)"
