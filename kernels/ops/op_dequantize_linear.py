"""DequantizeLinear: (x - zero_point) * scale, per tensor, per axis or blocked."""
import numpy as np

from ._quant import broadcast_param, is_integer, onnx_dtype
from .base import Kernel


class DequantizeLinear_10(Kernel):
    attributes = {}

    def run(self, x, scale, zero_point=None):
        a = self.__dict__
        axis, block = a.get("axis", 1), a.get("block_size", 0)
        if zero_point is not None and is_integer(x.dtype):  # converted and shifted in one pass
            y = self.xp.subtract(x, broadcast_param(zero_point, x.shape, axis, block), dtype=np.float32)
        else:
            y = x.astype(np.float32)
        y *= broadcast_param(scale, x.shape, axis, block)
        out_dtype = onnx_dtype(a["output_dtype"]) if a.get("output_dtype") else scale.dtype
        return (y.astype(out_dtype, copy=False),)


class DequantizeLinear_13(DequantizeLinear_10):
    """Adds per-axis dequantization."""

    attributes = {"axis": 1}


class DequantizeLinear_21(DequantizeLinear_10):
    """Adds blocked dequantization."""

    attributes = {"axis": 1, "block_size": 0}


class DequantizeLinear_23(DequantizeLinear_10):
    """Adds `output_dtype`."""

    attributes = {"axis": 1, "block_size": 0, "output_dtype": 0}
