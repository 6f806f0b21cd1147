"""Mod: the remainder of a / b, with the divisor's sign (fmod=0) or the dividend's (fmod=1)."""
from .base import Elementwise


class Mod_10(Elementwise):
    attributes = {"fmod": 0}

    @property
    def cuda(self):
        return "fmod(in0, in1)" if self.fmod else None  # Python-style mod has no one-liner for all types

    def compute(self, a, b, out=None):
        return (self.xp.fmod if self.fmod else self.xp.mod)(a, b, out=out)
