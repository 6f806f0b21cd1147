"""Reshape to a shape input; 0 copies the input's dim (unless allowzero, opset 14), -1 is inferred.

Returns a view when NumPy can: the fuser writes in place only into buffers it allocated.
"""
from rtd.errors import Code, RtdError

from .base import Kernel


class Reshape_5(Kernel):
    allowzero = 0

    def run(self, x, shape):
        shape = self.host(shape).astype(int).tolist()
        if not self.allowzero:
            shape = [x.shape[i] if d == 0 and i < x.ndim else d for i, d in enumerate(shape)]
        try:
            return (x.reshape(shape),)
        except ValueError:
            raise RtdError(Code.E_INPUT_INVALID, f"Reshape: cannot reshape {x.shape} to {shape}") from None


class Reshape_14(Reshape_5):
    attributes = {"allowzero": 0}
