"""BitCast: the input's bits read as the type `to` of the same width (little-endian, as every
host rtd runs on). The sub-byte types (int4, uint4, float4e2m1; int2, uint2) hold one value per
byte in its low bits, so a view (at any strides: the item sizes are equal) reinterprets them too; a bool out is 0 or 1 (a non-zero byte
is True) so no non-canonical bool escapes."""
import numpy as np
from onnx import TensorProto, helper

from rtd.errors import Code, RtdError

from .base import REQUIRED, Kernel

_SUB_BYTE = {TensorProto.INT4: 4, TensorProto.UINT4: 4, TensorProto.FLOAT4E2M1: 4, TensorProto.INT2: 2, TensorProto.UINT2: 2}
_BITS = {np.dtype(helper.tensor_dtype_to_np_dtype(t)): bits for t, bits in _SUB_BYTE.items()}


def _bits(dtype: np.dtype) -> int:
    return _BITS.get(dtype, dtype.itemsize * 8)


class BitCast_26(Kernel):
    attributes = {"to": REQUIRED}

    def setup(self):
        if self.to in (TensorProto.STRING, TensorProto.UNDEFINED):
            raise RtdError(Code.E_MODEL_INVALID, f"BitCast: to={self.to} is not a fixed-width type")
        try:
            self.dtype = np.dtype(helper.tensor_dtype_to_np_dtype(self.to))
        except (KeyError, ValueError):
            raise RtdError(Code.E_OP_UNSUPPORTED, f"BitCast: to={self.to} has no NumPy type here") from None

    def run(self, x):
        if x.dtype == object or _bits(x.dtype) != _bits(self.dtype):
            raise RtdError(Code.E_MODEL_INVALID, f"BitCast: {x.dtype} ({'string' if x.dtype == object else _bits(x.dtype)} bits) "
                                                 f"to {self.dtype} ({_bits(self.dtype)} bits)")
        if self.dtype == np.bool_:
            return (x.view(np.uint8) != 0,)
        return (x.view(self.dtype),)
