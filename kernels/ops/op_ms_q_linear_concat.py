"""com.microsoft QLinearConcat: 8-bit inputs, each with its own scale and zero point, joined in y's.

Inputs: Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per input. An input already in y's
scale and zero point is copied; any other is requantized through a 256-entry table (dequantize,
then quantize to y), as onnxruntime does, so the result is exact.
"""
import numpy as np

from rtd.errors import Code, RtdError

from ._axes import normalize_axis
from ._contrib import QLinearKernel
from ._quant import eight_bit, lookup_table
from .base import REQUIRED


class QLinearConcat_1(QLinearKernel):
    attributes = {"axis": REQUIRED}

    def setup(self):
        if not isinstance(self.axis, int) or isinstance(self.axis, bool):
            raise RtdError(Code.E_MODEL_INVALID, f"QLinearConcat: attribute axis={self.axis!r} is not an integer")
        self._tables = {}

    def run(self, y_scale, y_zero_point, *triples):
        xp, op = self.xp, self.op_type
        if not triples or len(triples) % 3:
            raise RtdError(Code.E_MODEL_INVALID, f"QLinearConcat: {len(triples)} inputs after Y_scale and Y_zero_point, "
                           "a positive multiple of 3 (X, X_scale, X_zero_point) needed")
        xs = triples[::3]
        dtype = eight_bit(op, *xs)
        axis = normalize_axis(self.axis, xs[0].ndim, op)
        parts = []
        for i, x in enumerate(xs):
            params = self.params(dtype, triples[3 * i + 1], triples[3 * i + 2], y_scale, y_zero_point)
            if params[0] == params[2] and params[1] == params[3]:
                parts.append(x)
                continue
            key = (i,) + tuple(p.tobytes() for p in params)
            table = self._tables.get(key)
            if table is None:
                if len(self._tables) >= 4 * len(xs):  # parameters fed at run time: keep the cache bounded
                    self._tables.clear()
                table = self._tables[key] = xp.asarray(lookup_table(dtype, *params, lambda v: v))
            parts.append(table.take(x.view(np.uint8)))
        try:
            return (xp.concatenate(parts, axis=axis),)
        except ValueError as e:
            raise RtdError(Code.E_INPUT_INVALID, f"QLinearConcat: {e}") from None
