"""MatMul: numpy.matmul semantics (1-D operands promoted and squeezed, batch dims broadcast).

A stacked A against a 2-D B (every transformer projection) is one GEMM over the flattened rows
rather than one BLAS call per batch entry.
"""
import numpy as np

from ..native.gemm import gemm_rows
from ._quant import frozen
from .base import Kernel


class MatMul_1(Kernel):
    def run(self, a, b):
        xp = self.xp
        if xp is np and a.ndim >= 2 and b.ndim == 2 and a.dtype == np.float32:   # rows shared among the threads
            a = np.ascontiguousarray(a)   # a strided a too: a native program runs this GEMM on its contiguous copy
            rows = gemm_rows(a.reshape(-1, a.shape[-1]), b, constant=frozen(b))
            if rows is not None:
                return (rows.reshape(a.shape[:-1] + (b.shape[1],)),)
        if a.ndim > 2 and b.ndim == 2 and a.flags.c_contiguous:
            y = xp.matmul(a.reshape(-1, a.shape[-1]), b).reshape(a.shape[:-1] + (b.shape[1],))
        else:
            y = xp.matmul(a, b)
        return (y if y.dtype == a.dtype else y.astype(a.dtype),)  # NumPy computes bfloat16 in float32
