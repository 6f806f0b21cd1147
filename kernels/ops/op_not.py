"""Not: logical negation of a bool tensor."""
from ._ufunc import Ufunc


class Not_1(Ufunc):
    ufunc, cuda = "logical_not", "!in0"
