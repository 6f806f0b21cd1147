"""Shared pieces of the com.microsoft contrib kernels that onnxruntime's optimizer and quantizer emit."""
import numpy as np

from ._quant import centred, quantize
from .base import Kernel
from .op_gelu import Gelu_20

MS_DOMAIN = "com.microsoft"


class MsKernel(Kernel):
    """A com.microsoft contrib op (opset 1 of that domain)."""

    domain = MS_DOMAIN


def gelu(attrs_approximate, xp):
    """The ONNX Gelu kernel, reused so erf/tanh GELU is computed one way everywhere."""
    return Gelu_20({"approximate": attrs_approximate}, xp)


def dynamic_uint8(xp, a):
    """DynamicQuantizeLinear of `a`: (uint8 values, scale, zero point) with 0 exactly representable."""
    lo, hi = min(float(a.min()), 0.0), max(float(a.max()), 0.0)
    scale = np.float32((hi - lo) / 255.0) if hi > lo else np.float32(1.0)
    zero_point = quantize(np, np.array(-lo / scale, np.float32), None, np.uint8)
    return quantize(xp, a / scale, zero_point, np.uint8), scale, zero_point


def integer_matmul_to_float(xp, a, a_zero_point, b, b_zero_point, scale, bias):
    """(a - a_zp) @ (b - b_zp) * scale (+ bias), exact integer products carried in float64."""
    acc = xp.matmul(centred(a, a_zero_point), centred(b, b_zero_point))
    y = (acc * scale.astype(np.float64)).astype(np.float32)
    if bias is not None:
        y += bias
    return y
