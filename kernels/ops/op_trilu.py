"""Trilu: keep the upper (or lower) triangle of the last two axes, offset by diagonal k."""
from .base import Kernel


class Trilu_14(Kernel):
    attributes = {"upper": 1}

    def run(self, x, k=None):
        k = 0 if k is None else int(self.host(self.xp.asarray(k)).reshape(-1)[0])
        return ((self.xp.triu if self.upper else self.xp.tril)(x, k),)
