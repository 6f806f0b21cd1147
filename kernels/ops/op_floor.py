"""Floor: largest integer not above each element."""
from ._ufunc import Ufunc


class Floor_6(Ufunc):
    ufunc, cuda = "floor", "floor(in0)"
