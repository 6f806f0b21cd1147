"""MatMul: numpy.matmul semantics (1-D operands promoted and squeezed, batch dims broadcast)."""
from .base import Kernel


class MatMul_1(Kernel):
    def run(self, a, b):
        return (self.xp.matmul(a, b),)
