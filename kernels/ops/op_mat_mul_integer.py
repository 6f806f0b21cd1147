"""MatMulInteger: (A - a_zero_point) @ (B - b_zero_point) accumulated exactly into int32.

8-bit NumPy operands with one zero point for A and a 2-D B are summed in int32 from the bytes by the compiled
kernel (native/quant.py), B's centred columns made into int16 rows once where B cannot change: one read of
A's bytes instead of a float copy four times their size, and half the weight bytes of a float GEMM (ddddocr's
22 x 1024 by 1024 x 8210: 7.2 -> 4.5 ms). Others (a batched B, a zero point per row of A, CuPy) go to float
GEMMs over centred float copies (`integer_matmul`). Both sums are exact: the same int32.
"""
import numpy as np

from ..constant import frozen
from ..native import quant
from ..native.packed import packed
from ._quant import EIGHT_BIT, CentredWeight, integer_matmul, span
from .base import Kernel


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
        if self.xp is not np or a.dtype not in EIGHT_BIT or b.dtype not in EIGHT_BIT or b.ndim != 2 \
                or (a_zero_point is not None and (a_zero_point.size != 1 or a_zero_point.dtype != a.dtype)) \
                or (b_zero_point is not None and (b_zero_point.dtype != b.dtype or b_zero_point.size not in (1, b.shape[1]))):
            return None
        zero = np.zeros((), b.dtype) if b_zero_point is None else b_zero_point.reshape(-1)

        def rows():   # B's centred columns, (N, K) int16, written in place (a centred B then its transpose: twice the bytes)
            out = np.empty(b.shape[::-1], np.int16)
            np.subtract(b.T, zero.reshape(-1, 1), out=out, dtype=np.int16)
            return out
        w_rows = packed(b, ("matmul-integer", zero.tobytes()), rows) if frozen(b) else rows()
        return quant.matmul_8bit(np.ascontiguousarray(a), 0 if a_zero_point is None else int(a_zero_point.reshape(())), w_rows)
