"""MatMulInteger: (A - a_zero_point) @ (B - b_zero_point) accumulated exactly into int32.

A product into few columns (an attention's scores against one vector) of 8-bit NumPy operands, one zero
point for A and a 2-D B, is summed in int32 from the bytes by the compiled kernel (native/quant.py), B's
centred columns made into int16 rows once where B cannot change: one read of A's bytes instead of a float
copy four times their size. Wider products go to float GEMMs over centred float copies (`integer_matmul`),
faster there than the kernel's row-by-column sums. Both sums are exact: the same int32.
"""
import numpy as np

from ..constant import frozen
from ..native import quant
from ..native.packed import packed
from ._quant import EIGHT_BIT, CentredWeight, integer_matmul, span
from .base import Kernel

FEW_COLUMNS = 32   # measured: up to here the compiled sums beat a float GEMM (96 x 512 by 512 x 15: 0.04 vs 0.09 ms)


class MatMulInteger_10(Kernel):
    def setup(self):
        self.weight = CentredWeight()

    def run(self, a, b, a_zero_point=None, b_zero_point=None):
        y = self._compiled(a, b, a_zero_point, b_zero_point)
        if y is not None:
            return (y,)
        if a_zero_point is not None and a_zero_point.size > 1:  # per row of A
            a_zero_point = a_zero_point.reshape(-1, 1)
        b_max = span(b.dtype, None if b_zero_point is None else self.host(b_zero_point))
        return (integer_matmul(self.xp, a, a_zero_point, self.weight.get(self.xp, b, b_zero_point), b_max),)

    def _compiled(self, a, b, a_zero_point, b_zero_point):
        """The compiled 8-bit product, or None where it does not apply."""
        if self.xp is not np or a.dtype not in EIGHT_BIT or b.dtype not in EIGHT_BIT or b.ndim != 2 or b.shape[1] > FEW_COLUMNS \
                or (a_zero_point is not None and (a_zero_point.size != 1 or a_zero_point.dtype != a.dtype)) \
                or (b_zero_point is not None and (b_zero_point.dtype != b.dtype or b_zero_point.size not in (1, b.shape[1]))):
            return None
        zero = np.zeros((), b.dtype) if b_zero_point is None else b_zero_point.reshape(-1)

        def rows():   # B's centred columns, (N, K) int16
            return np.ascontiguousarray(np.subtract(b, zero, dtype=np.int16).T)
        w_rows = packed(b, ("matmul-integer", zero.tobytes()), rows) if frozen(b) else rows()
        return quant.matmul_8bit(np.ascontiguousarray(a), 0 if a_zero_point is None else int(a_zero_point.reshape(())), w_rows)
