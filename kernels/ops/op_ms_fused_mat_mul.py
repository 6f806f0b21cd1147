"""com.microsoft FusedMatMul: alpha * op(A) @ op(B) with transposes of the last two axes folded in."""
from rtd.errors import Code, RtdError

from ._contrib import MsKernel


class FusedMatMul_1(MsKernel):
    attributes = {"alpha": 1.0, "transA": 0, "transB": 0, "transBatchA": 0, "transBatchB": 0}

    def setup(self):
        if self.transBatchA or self.transBatchB:
            raise RtdError(Code.E_OP_UNSUPPORTED, "FusedMatMul: transBatchA/transBatchB")

    def run(self, a, b):
        a = a.swapaxes(-1, -2) if self.transA and a.ndim > 1 else a
        b = b.swapaxes(-1, -2) if self.transB and b.ndim > 1 else b
        y = self.xp.matmul(a, b)
        if self.alpha != 1.0:
            y *= y.dtype.type(self.alpha)
        return (y,)
