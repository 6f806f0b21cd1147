"""Gemm: alpha * A' @ B' + beta * C, one BLAS call into the output, then C added in place."""
from .base import Kernel


class Gemm_1(Kernel):
    """Opsets 1-6 carried `broadcast`; from 7 on C always broadcasts unidirectionally."""

    attributes = {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0, "broadcast": 0}

    def run(self, a, b, c=None):
        xp = self.xp
        a = a.T if self.transA else a
        b = b.T if self.transB else b
        y = xp.empty((a.shape[0], b.shape[1]), xp.result_type(a, b))
        xp.matmul(a, b, out=y)
        if self.alpha != 1.0:
            y *= y.dtype.type(self.alpha)
        if c is not None and self.beta != 0.0:
            if self.beta == 1.0:
                y += c
            else:
                y += y.dtype.type(self.beta) * c
        return (y,)


class Gemm_7(Gemm_1):
    attributes = {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0}
