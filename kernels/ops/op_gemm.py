"""Gemm: alpha * A' @ B' + beta * C, one BLAS call into the output, then C added in place.

A plain float32 a @ B + c (alpha 1, a not transposed, c a row) is rtd's GEMM with c added in it, as
the MatMulBias the lowering makes of it computes: a Loop body's first call runs this node as it is and
its plans run the fused one, and a model's runs must agree bit for bit.
"""
import numpy as np

from ..native.gemm import gemm_rows
from ._quant import frozen
from .base import Kernel


class Gemm_1(Kernel):
    """Opsets 1-6 carried `broadcast`; from 7 on C always broadcasts unidirectionally."""

    attributes = {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0, "broadcast": 0}

    def run(self, a, b, c=None):
        xp = self.xp
        if xp is np and self.alpha == 1.0 and not self.transA and a.ndim == 2 and b.ndim == 2 and a.dtype == np.float32 \
                and (c is None or (self.beta == 1.0 and c.shape[-1:] == (c.size,))):
            constant = frozen(b)   # else w row-major: a transposed one would be read as dot products for a few rows
            w = b.T if self.transB else b
            rows = gemm_rows(np.ascontiguousarray(a), w if constant else np.ascontiguousarray(w),
                             None if c is None else np.ascontiguousarray(c.reshape(-1)), constant=constant)
            if rows is not None:
                return (rows,)
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
