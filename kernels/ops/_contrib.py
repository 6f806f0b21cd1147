"""Shared pieces of the com.microsoft contrib kernels that onnxruntime's optimizer and quantizer emit."""
import math

import numpy as np

from ._quant import centred, eight_bit, lookup_table, quantize, scalar_param
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
    scale = (np.float32(hi) - np.float32(lo)) / np.float32(255) if hi > lo else np.float32(1.0)  # float32 steps, as ORT
    zero_point = quantize(np, np.array(-lo / scale, np.float32), None, np.uint8)
    return quantize(xp, a / scale, zero_point, np.uint8), scale, zero_point


def integer_matmul_to_float(xp, a, a_zero_point, b, b_zero_point, scale, bias):
    """(a - a_zp) @ (b - b_zp) * scale (+ bias), exact integer products carried in float64."""
    acc = xp.matmul(centred(a, a_zero_point), centred(b, b_zero_point))
    y = (acc * scale.astype(np.float64)).astype(np.float32)
    if bias is not None:
        y += bias
    return y


class QLinearKernel(MsKernel):
    """A per-tensor 8-bit com.microsoft op: scales and zero points are read on the host as NumPy scalars."""

    def scalar(self, name, value, dtype=None):
        return scalar_param(self.op_type, name, self.host(value), dtype)

    def params(self, dtype, x_scale, x_zero_point, y_scale, y_zero_point, names=("X", "Y")):
        """(x_scale, x_zp, y_scale, y_zp): scales as float32, zero points of `dtype` (absent: 0); `names` are
        the inputs' names in the op's schema, for refusals."""
        (x, y), zero = names, dtype.type(0)
        x_zp, y_zp = self.scalar(f"{x}_zero_point", x_zero_point, dtype), self.scalar(f"{y}_zero_point", y_zero_point, dtype)
        return (np.float32(self.scalar(f"{x}_scale", x_scale)), zero if x_zp is None else x_zp,
                np.float32(self.scalar(f"{y}_scale", y_scale)), zero if y_zp is None else y_zp)


class QLinearLookup(QLinearKernel):
    """An 8-bit unary op computed as onnxruntime does: a 256-entry table over x's bytes, built from the
    scales and zero points (kept while they stay the same) by `transform` (float32 → float32)."""

    def setup(self):
        self._table = (None, None)

    def transform(self, x):
        raise NotImplementedError

    def run(self, x, x_scale, x_zero_point, y_scale, y_zero_point=None):
        dtype = eight_bit(self.op_type, x)
        params = self.params(dtype, x_scale, x_zero_point, y_scale, y_zero_point)
        key, kept = tuple(p.tobytes() for p in params), self._table  # one read: runs may share the kernel
        if kept[0] != key:
            kept = self._table = (key, self.xp.asarray(lookup_table(dtype, *params, self.transform)))
        return (kept[1].take(x.view(np.uint8)),)


def scalar_side(a_shape, b_shape) -> str | None:
    """Which input onnxruntime's broadcaster hands its 8-bit binary kernels as a scalar per span: "a" or
    "b" when that input is broadcast along the output's innermost axis longer than 1 (or is one
    value), None when both run along it. The kernels' float32 operation order differs by case."""
    if math.prod(a_shape) == 1:
        return "a"
    if math.prod(b_shape) == 1:
        return "b"
    out = np.broadcast_shapes(a_shape, b_shape)
    axis = max((i for i, n in enumerate(out) if n > 1), default=None)
    if axis is None:
        return None
    a_dim = (1,) * (len(out) - len(a_shape)) + tuple(a_shape)
    b_dim = (1,) * (len(out) - len(b_shape)) + tuple(b_shape)
    return "a" if a_dim[axis] == 1 else "b" if b_dim[axis] == 1 else None


class QLinearBinary(QLinearKernel):
    """A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp (per tensor, zero points optional) → 8-bit C.

    Two 8-bit inputs have 65,536 pairs: `combine` (onnxruntime's float32 steps) fills a table of every
    pair once per parameter set and broadcast case, and a run is one gather over (a << 8) | b.
    """

    def setup(self):
        self._table = (None, None)

    def run(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point=None):
        xp = self.xp
        dtype = eight_bit(self.op_type, a, b)
        a_scale, a_zp, c_scale, c_zp = self.params(dtype, a_scale, a_zero_point, c_scale, c_zero_point, ("A", "C"))
        b_scale, b_zp, _, _ = self.params(dtype, b_scale, b_zero_point, c_scale, c_zero_point, ("B", "C"))
        params = (a_scale, a_zp, b_scale, b_zp, c_scale, c_zp)
        side = scalar_side(a.shape, b.shape)
        key, kept = (side,) + tuple(p.tobytes() for p in params), self._table  # one read: runs may share the kernel
        if kept[0] != key:
            values = np.arange(256, dtype=np.uint8).view(dtype)
            table = self.combine(values[:, None], values[None, :], *params, dtype, side)
            kept = self._table = (key, xp.asarray(table.reshape(-1)))
        pairs = xp.left_shift(a.view(np.uint8), 8, dtype=np.uint16)
        pairs = xp.bitwise_or(pairs, b.view(np.uint8), dtype=np.uint16)
        return (kept[1].take(pairs),)

    def combine(self, a, b, a_scale, a_zp, b_scale, b_zp, c_scale, c_zp, dtype, side):
        """C for host arrays a, b; `side` is `scalar_side`'s answer for the inputs' real shapes."""
        raise NotImplementedError


def global_average_8bit(xp, x, params, dtype, channels_last):
    """onnxruntime's QLinearGlobalAveragePool: exact integer sums over the image less x_zp · size, times
    x_scale / (y_scale · size) in float32, half to even, plus y_zp, saturated. Kept dims are 1."""
    x_scale, x_zp, y_scale, y_zp = params
    spatial = tuple(range(1, x.ndim - 1)) if channels_last else tuple(range(2, x.ndim))
    size = math.prod(x.shape[a] for a in spatial)
    acc = xp.sum(x, axis=spatial, dtype=np.int64, keepdims=True)
    acc -= int(x_zp) * size
    scale = x_scale / (y_scale * np.float32(size))
    return quantize(xp, xp.multiply(acc, scale, dtype=np.float32), y_zp, dtype)
