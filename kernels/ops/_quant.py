"""Linear quantization arithmetic shared by the Quantize/Dequantize and QLinear*/…Integer ops.

Integer products are computed with float BLAS, which is exact while every partial sum is an
integer below the mantissa's reach: 2^24 in float32, 2^53 in float64. NumPy has no integer
GEMM worth the name, and sgemm is about twice dgemm's speed, so `integer_matmul` bounds
|sum| ≤ K · max|a - a_zp| · max|b - b_zp| and runs float32 GEMMs over slices of K short enough
for that bound (uint8 × int8: 513 terms), adding the slices' results in float64.
A weight's centred float copy is made once and kept while the weight cannot change
(`CentredWeight`), so a run converts only the activations. Bounds come from the integer
types and zero points (`span`), never from a pass over the data.
"""
import functools

import ml_dtypes
import numpy as np
from onnx.helper import tensor_dtype_to_np_dtype

from rtd.errors import Code, RtdError

from ..constant import frozen
from ..native.packed import packed

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


@functools.lru_cache(maxsize=None)
def _integer_range(dtype) -> tuple:
    info = ml_dtypes.iinfo(dtype)
    return int(info.min), int(info.max)


def quantize(xp, scaled, zero_point, dtype, saturate=True):
    """Round `scaled` (x / scale, float; a temporary, overwritten here) half to even, add the zero
    point, saturate, cast to `dtype`."""
    dtype = np.dtype(dtype)
    if is_integer(dtype):
        q = xp.rint(scaled, out=scaled) if isinstance(scaled, xp.ndarray) else xp.rint(scaled)
        if zero_point is not None:
            q += zero_point.astype(q.dtype, copy=False)
        return xp.clip(q, *_integer_range(dtype), out=q).astype(dtype)
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


def centred(x, zero_point, shape=None, dtype=np.float64):
    """x - zero_point as float (exact for every 8- and 16-bit integer type in float32, for all here in float64)."""
    if zero_point is None:
        return x.astype(dtype)
    zp = zero_point if shape is None else zero_point.reshape(shape)
    return np.subtract(x, zp, dtype=dtype) if isinstance(x, np.ndarray) else x.astype(dtype) - zp.astype(dtype)


FLOAT32_EXACT = 2 ** 24  # every integer of smaller magnitude is a float32


def span(dtype, zero_point) -> int:
    """The largest |x - zero_point| that x's integer type allows (zero_point: None or a host array)."""
    lo, hi = _integer_range(np.dtype(dtype))
    if zero_point is None or zero_point.size == 0:
        return max(abs(lo), abs(hi))
    if zero_point.size == 1:  # the usual case: no reductions
        z = int(zero_point.reshape(()))
        return max(hi - z, z - lo)
    return max(hi - int(zero_point.min()), int(zero_point.max()) - lo)


class CentredWeight:
    """w - zero_point as float (one pass), kept (read-only) while w is frozen and its zero point unchanged: on the CPU one
    copy per weight array and zero point, whichever kernel asks."""

    def __init__(self):
        self._kept = None  # (w, zero point's dtype/shape/bytes, dtype, centred)

    def get(self, xp, w, zero_point, zp_shape=None, dtype=np.float32):
        key = None if zero_point is None else self._key(zero_point if xp is np else xp.asnumpy(zero_point))
        kept = self._kept
        if kept is not None and kept[0] is w and kept[1] == key and kept[2] == dtype:
            return kept[3]
        if frozen(w) and xp is np:
            # one copy per weight array, shared by every kernel instance over it (a traced run's, each signature's
            # plan's) and read-only, so what is made from it (packed panels) is shared and kept too
            make = lambda: centred(w, zero_point, zp_shape, dtype)  # noqa: E731
            c = packed(w, ("centred", key, np.dtype(dtype).str, zp_shape), make)
        else:
            c = centred(w, zero_point, zp_shape, dtype)
        if frozen(w):
            self._kept = (w, key, np.dtype(dtype), c)
        return c

    @staticmethod
    def _key(zero_point) -> tuple:
        return zero_point.dtype.str, zero_point.shape, zero_point.tobytes()


def integer_matmul(xp, a, a_zero_point, b_centred, b_max):
    """(a - a_zero_point) @ b_centred as exact int32; a_zero_point broadcasts against a (per row: (M, 1)),
    b_max bounds |b_centred| (`span` of B's type and zero point)."""
    k = a.shape[-1]
    zp_host = None if a_zero_point is None else np.asarray(a_zero_point if xp is np else xp.asnumpy(a_zero_point))
    per_term = span(a.dtype, zp_host) * b_max
    chunk = k if per_term * k < FLOAT32_EXACT else max(1, (FLOAT32_EXACT - 1) // per_term)
    a32 = centred(a, a_zero_point, dtype=np.float32)
    if chunk >= k:
        return xp.matmul(a32, b_centred).astype(np.int32)
    acc = None
    for start in range(0, k, chunk):
        part = xp.matmul(a32[..., start:start + chunk],
                         b_centred[start:start + chunk] if b_centred.ndim == 1 else b_centred[..., start:start + chunk, :])
        acc = part.astype(np.float64) if acc is None else xp.add(acc, part, out=acc)
    return acc.astype(np.int32)


def requantize(xp, acc, multiplier, zero_point, dtype):
    """int32 acc * multiplier rounded half to even, plus zero point, saturated to `dtype`: in float32
    like onnxruntime's MlasRequantizeOutput (acc made a float32, one float32 product), so a product
    that float32 rounds onto .5 rounds as there."""
    return quantize(xp, xp.multiply(acc, multiplier.astype(np.float32), dtype=np.float32), zero_point, dtype)


EIGHT_BIT = (np.dtype(np.uint8), np.dtype(np.int8))


def scalar_param(op, name, value, dtype=None):
    """A per-tensor scale or zero point (a host array or None) as a NumPy scalar (None stays None);
    E_OP_UNSUPPORTED when it holds more than one value or (for a zero point) its type is not `dtype`: the
    model's own parameters, so the worker's warm-up refuses the load on them."""
    if value is None:
        return None
    if value.size != 1:
        raise RtdError(Code.E_OP_UNSUPPORTED, f"{op}: {name} must be a scalar (per-tensor), got shape {value.shape}")
    if dtype is not None and value.dtype != dtype:
        raise RtdError(Code.E_OP_UNSUPPORTED, f"{op}: {name} is {value.dtype}, the data is {np.dtype(dtype)}")
    return value.reshape(())[()]


def eight_bit(op, *arrays):
    """The common 8-bit integer type of `arrays`; E_OP_UNSUPPORTED for any other or a mix (types the
    model declares or makes: the request's types are checked against the declared ones first)."""
    dtypes = {a.dtype for a in arrays}
    if len(dtypes) != 1 or next(iter(dtypes)) not in EIGHT_BIT:
        raise RtdError(Code.E_OP_UNSUPPORTED, f"{op}: inputs must all be uint8 or all int8, got {sorted(map(str, dtypes))}")
    return next(iter(dtypes))


def lookup_table(dtype, x_scale, x_zero_point, y_scale, y_zero_point, fn):
    """The 256-entry table y[byte] of an 8-bit op, indexed by x's bytes: each value dequantized
    (x_scale * (x - x_zp) in float32), mapped by `fn` (float32 in, float32 out), then quantized
    (float32 division by y_scale, half to even, plus y_zp, saturated), as onnxruntime builds it."""
    values = np.arange(256, dtype=np.uint8).view(dtype).astype(np.int32) - int(x_zero_point)
    y = fn(values.astype(np.float32) * np.float32(x_scale))
    return quantize(np, y / np.float32(y_scale), y_zero_point, dtype)
