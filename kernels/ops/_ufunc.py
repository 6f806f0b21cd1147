"""Ufunc: the shared base of element-wise ops that are exactly one array-module ufunc."""
from .base import Elementwise


class Ufunc(Elementwise):
    """`ufunc` names the xp function (`"arccos"`, `"less_equal"`); it is looked up once, at setup."""

    ufunc: str

    def setup(self) -> None:
        self._ufunc = getattr(self.xp, self.ufunc)

    def compute(self, *inputs, out=None):
        return self._ufunc(*inputs, out=out)
