"""SwiGLU: Swish_alpha(A) * B = A * sigmoid(alpha * A) * B over two tensors of one shape (the
spec allows no broadcasting); element-wise, so the fuser chains it like Swish."""
from rtd.errors import Code, RtdError

from .base import Elementwise
from .op_swish import Swish_24


class SwiGLU_28(Elementwise):
    attributes = {"alpha": 1.0}

    def setup(self):
        self.swish = Swish_24({"alpha": self.alpha}, self.xp)

    @property
    def cuda(self):
        return f"in0 / (1 + exp(-({self.alpha!r}) * in0)) * in1"

    def compute(self, a, b, out=None):
        if a.shape != b.shape:
            raise RtdError(Code.E_INPUT_INVALID, f"SwiGLU: gate {list(a.shape)} and value {list(b.shape)} differ in shape")
        y = self.swish.compute(a, out=out)
        return self.xp.multiply(y, b, out=y)
