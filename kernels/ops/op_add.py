"""Add: a + b under broadcasting."""
from ._ufunc import Ufunc


class Add_7(Ufunc):
    ufunc, cuda = "add", "in0 + in1"
