"""Linear quantization arithmetic shared by the Quantize/Dequantize and QLinear*/…Integer ops.

Integer products are computed as float64 BLAS matmuls: every int8/uint8/int16 dot product of
realistic length is exact in a double, and dgemm is far faster than NumPy's integer matmul.
"""
import ml_dtypes
import numpy as np
from onnx.helper import tensor_dtype_to_np_dtype

from rtd.errors import Code, RtdError

_INTEGER_KINDS = {np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16, np.int32,
                                        ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2)}
_FLOAT8 = {np.dtype(t) for t in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz,
                                 ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz)}
_SMALL_FLOATS = {np.dtype(t) for t in (ml_dtypes.float4_e2m1fn, ml_dtypes.float6_e2m3fn, ml_dtypes.float6_e3m2fn)}


def onnx_dtype(code: int) -> np.dtype:
    return np.dtype(tensor_dtype_to_np_dtype(code))


def is_integer(dtype) -> bool:
    """True for the integer quantized types, ml_dtypes' 2- and 4-bit ones included (their kind is 'V')."""
    return np.dtype(dtype) in _INTEGER_KINDS


def broadcast_param(value, shape, axis, block_size=0):
    """A scale or zero point reshaped (per-axis) or repeated (blocked) to broadcast against `shape`."""
    if value.ndim == 0 or value.size == 1:
        return value.reshape(())
    axis = axis % len(shape)
    if not block_size:
        dims = [1] * len(shape)
        dims[axis] = value.size
        return value.reshape(dims)
    value = value.repeat(block_size, axis=axis)
    if value.shape[axis] != shape[axis]:
        value = value.take(range(shape[axis]), axis=axis)
    if value.shape != tuple(shape):
        raise RtdError(Code.E_INPUT_INVALID,
                       f"blocked quantization: parameter shape {value.shape} does not fit input {tuple(shape)}")
    return value


def quantize(xp, scaled, zero_point, dtype, saturate=True):
    """Round `scaled` (x / scale, float) half to even, add the zero point, saturate, cast to `dtype`."""
    dtype = np.dtype(dtype)
    if is_integer(dtype):
        info = ml_dtypes.iinfo(dtype)
        q = xp.rint(scaled)
        if zero_point is not None:
            q += zero_point.astype(q.dtype)
        return xp.clip(q, info.min, info.max).astype(dtype)
    if dtype in _FLOAT8:
        if saturate:
            info = ml_dtypes.finfo(dtype)
            scaled = xp.clip(scaled, float(info.min), float(info.max))
        return scaled.astype(dtype)
    if dtype in _SMALL_FLOATS:  # no inf/NaN encodings: the cast saturates by itself
        if zero_point is not None:
            scaled = scaled + zero_point.astype(scaled.dtype)
        return scaled.astype(dtype)
    raise RtdError(Code.E_OP_UNSUPPORTED, f"quantization to {dtype} is not supported")


def centred(x, zero_point, shape=None):
    """x - zero_point as float64 (exact for every integer type here)."""
    v = x.astype(np.float64)
    if zero_point is not None:
        v -= zero_point.astype(np.float64) if shape is None else zero_point.astype(np.float64).reshape(shape)
    return v


def requantize(xp, acc, multiplier, zero_point, dtype):
    """acc * multiplier rounded half to even, plus zero point, saturated to `dtype`."""
    return quantize(xp, acc * multiplier.astype(np.float64), zero_point, dtype)
