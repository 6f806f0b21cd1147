"""MatMul: numpy.matmul semantics (1-D operands promoted and squeezed, batch dims broadcast)."""
from .base import Kernel


class MatMul_1(Kernel):
    def run(self, a, b):
        y = self.xp.matmul(a, b)
        return (y if y.dtype == a.dtype else y.astype(a.dtype),)  # NumPy computes bfloat16 in float32
