"""Add: a + b under broadcasting."""
from .base import Elementwise


class Add_7(Elementwise):
    cuda = "in0 + in1"

    def compute(self, a, b, out=None):
        return self.xp.add(a, b, out=out)
