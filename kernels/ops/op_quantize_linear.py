"""QuantizeLinear: saturate(round(x / scale) + zero_point), per tensor, per axis or blocked."""
from ._quant import broadcast_param, onnx_dtype, quantize
from .base import Kernel


class QuantizeLinear_10(Kernel):
    attributes = {}

    def run(self, x, scale, zero_point=None):
        a = self.__dict__
        axis, block = a.get("axis", 1), a.get("block_size", 0)
        if zero_point is not None:
            dtype = zero_point.dtype
            zero_point = broadcast_param(zero_point, x.shape, axis, block)
        else:
            dtype = onnx_dtype(a.get("output_dtype") or 2)  # 2 = UINT8
        scale = broadcast_param(scale, x.shape, axis, block)
        precision = a.get("precision")
        if precision:
            work = onnx_dtype(precision)
            scaled = x.astype(work) / scale.astype(work)
        else:
            scaled = x / scale
        return (quantize(self.xp, scaled, zero_point, dtype, a.get("saturate", 1)),)

class QuantizeLinear_13(QuantizeLinear_10):
    """Adds per-axis quantization."""

    attributes = {"axis": 1}

class QuantizeLinear_19(QuantizeLinear_10):
    """Adds float8 outputs and `saturate`."""

    attributes = {"axis": 1, "saturate": 1}

class QuantizeLinear_21(QuantizeLinear_10):
    """Adds blocked quantization, 4-bit outputs and `output_dtype`."""

    attributes = {"axis": 1, "saturate": 1, "block_size": 0, "output_dtype": 0}

class QuantizeLinear_23(QuantizeLinear_10):
    """Adds `precision`, the type the division is carried out in."""

    attributes = {"axis": 1, "saturate": 1, "block_size": 0, "output_dtype": 0, "precision": 0}
