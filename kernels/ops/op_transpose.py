"""Transpose by `perm` (default: reverse the axes). Returns a strided view."""
from rtd.errors import Code, RtdError

from ._axes import normalize_axes
from .base import Kernel


class Transpose_1(Kernel):
    attributes = {"perm": None}

    def setup(self):
        self.order = None if self.perm is None else normalize_axes(self.perm, len(self.perm), "Transpose")

    def run(self, x):
        if self.order is not None and len(self.order) != x.ndim:
            raise RtdError(Code.E_INPUT_INVALID, f"Transpose: perm {self.perm} for rank {x.ndim}")
        return (self.xp.transpose(x, self.order),)
