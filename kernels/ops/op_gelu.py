"""Gelu: x * Phi(x) exactly (erf) or by the tanh approximation (`approximate="tanh"`); float32 by the
compiled activations (native/activation.py), in the same order of operations as the NumPy form here."""
import math

from rtd.errors import Code, RtdError

import numpy as np

from ..native.activation import ERF, GELU, GELU_DIV, GELU_TANH, activation
from . import _erf
from ._blocked import blockable, in_blocks
from .base import Elementwise

_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


class Gelu_20(Elementwise):
    attributes = {"approximate": "none"}
    # erf's argument x/√2 as x·(1/√2). A GELU fused from an exporter's Erf pattern takes the step its
    # graph wrote instead (fuse_gelu: Div by its √2 or Mul by its 1/√2), so it rounds as the unfused
    # graph does: x/1.4142135 and x·0.70710677 differ in the last bit for about 4 in 10 float32 x, and a
    # DynamicQuantizeLinear downstream turns a last-bit difference into a whole quantum now and then.
    erf_scale_op, erf_scale = "Mul", math.sqrt(0.5)

    def setup(self) -> None:
        if self.approximate not in ("none", "tanh"):
            raise RtdError(Code.E_MODEL_INVALID, f"Gelu: approximate={self.approximate!r} is not 'none' or 'tanh'")

    @property
    def cuda(self):
        if self.approximate == "tanh":
            return f"0.5 * in0 * (1 + tanh({_SQRT_2_OVER_PI!r} * (in0 + 0.044715 * in0 * in0 * in0)))"
        return f"0.5 * in0 * (1 + erf(in0 {'/' if self.erf_scale_op == 'Div' else '*'} {self.erf_scale!r}))"

    def compute(self, x, out=None):
        if self.xp is np and (op := self.compiled_op()) is not None and (y := activation(op, x, out)) is not None:
            return y
        if blockable(self.xp, x, out):
            return in_blocks(self._gelu, x, out)
        return self._gelu(x, out)

    def compiled_op(self) -> int | None:
        """activation.c's GELU that computes this one (the tanh form; erf's argument as x times float32 1/√2,
        or x divided by float32 √2), or None where the graph scales it by another constant."""
        if self.approximate == "tanh":
            return GELU_TANH
        if self.erf_scale_op == "Mul" and np.float32(self.erf_scale) == np.float32(math.sqrt(0.5)):
            return GELU
        if self.erf_scale_op == "Div" and np.float32(self.erf_scale) == np.float32(math.sqrt(2)):
            return GELU_DIV
        return None

    def _gelu(self, x, out):
        xp = self.xp
        if self.approximate == "tanh":
            gate = xp.multiply(x, x)  # sqrt(2/pi) * (x + 0.044715 x^3) = x * (c + c*0.044715 * x^2)
            gate *= _SQRT_2_OVER_PI * 0.044715
            gate += _SQRT_2_OVER_PI
            gate *= x
            xp.tanh(gate, out=gate)
        else:
            scale = x.dtype.type(self.erf_scale)  # typed: bfloat16 * float is float32
            gate = xp.divide(x, scale) if self.erf_scale_op == "Div" else xp.multiply(x, scale)
            if xp is not np or activation(ERF, gate, gate) is None:   # as the Erf op's kernel computes it
                _erf.erf(xp, gate, out=gate)
        gate += 1
        gate *= 0.5
        return xp.multiply(x, gate, out=out)
