"""MatMulInteger: (A - a_zero_point) @ (B - b_zero_point) accumulated exactly into int32.

8-bit NumPy operands with one zero point for A and a 2-D B are summed in int32 by the compiled kernel
(native/quant.py) from A's bytes and B's as stored: no float copy of A four times its size, and no copy of B
at all (ddddocr's 22 x 1024 by 1024 x 8210: 7.2 ms over float copies). Others (a batched B, a zero point per
row of A, CuPy) go to float GEMMs over centred float copies (`integer_matmul`). Both sums are exact: the same int32.
"""
import numpy as np

from ..native import quant
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
        zero = np.zeros(1, b.dtype) if b_zero_point is None else b_zero_point.reshape(-1)
        return quant.matmul_8bit(np.ascontiguousarray(a), 0 if a_zero_point is None else int(a_zero_point.reshape(())),
                                 np.ascontiguousarray(b), zero)
