"""Div: a / b under broadcasting; integer division truncates toward zero, as C does."""
from ._legacy_broadcast import LegacyBroadcast
from .base import Elementwise


class Div_7(Elementwise):
    cuda = "in0 / in1"

    def compute(self, a, b, out=None):
        xp = self.xp
        if a.dtype.kind not in "iu" or b.dtype.kind not in "iu":  # floats, bfloat16 (kind "V") included
            return xp.divide(a, b, out=out)
        if a.dtype.kind == "u" and b.dtype.kind == "u":
            return xp.floor_divide(a, b, out=out)
        # a - fmod(a, b) is an exact multiple of b, so floor division of it truncates
        exact = xp.fmod(a, b)
        xp.subtract(a, exact, out=exact)
        return xp.floor_divide(exact, b, out=out)


class Div_1(LegacyBroadcast, Div_7):
    """Opsets 1-6: broadcasting only when asked, B aligned at `axis`."""
