"""IsNaN: true where an element is NaN."""
from ._ufunc import Ufunc


class IsNaN_9(Ufunc):
    ufunc, cuda = "isnan", "isnan(in0)"
