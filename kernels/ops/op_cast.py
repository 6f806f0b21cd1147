"""Cast to the `to` type, including strings, bfloat16, the float8/float4/int4 families and e8m0.

Versions: 6 (`to` as a type enum), 19 (`saturate` for float8 targets), 24 (`round_mode` for
float8e8m0). The encodings are those of onnx.numpy_helper and ml_dtypes, which the onnx
reference uses too. The narrow types exist only on the host, so Cast computes in NumPy.
"""
import numpy as np
from onnx import TensorProto, helper, numpy_helper

from rtd.errors import Code, RtdError

from .base import REQUIRED, Kernel

_SATURATING = {TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2, TensorProto.FLOAT8E5M2FNUZ}


def target_dtype(to: int) -> np.dtype:
    try:
        return np.dtype(object) if to == TensorProto.STRING else np.dtype(helper.tensor_dtype_to_np_dtype(to))
    except (KeyError, ValueError, TypeError):
        raise RtdError(Code.E_OP_UNSUPPORTED, f"Cast: target type {to}") from None


def cast(x: np.ndarray, to: int, saturate: bool = True, round_mode: str = "up") -> np.ndarray:
    """x as ONNX type `to`: out-of-range float8 values clamp when `saturate` (else become NaN/inf)."""
    if to == TensorProto.STRING:
        return x.astype(np.str_).astype(object)
    dtype = target_dtype(to)
    if to in _SATURATING and saturate:
        return numpy_helper.saturate_cast(x, dtype)
    if to == TensorProto.FLOAT8E8M0:
        return numpy_helper.to_float8e8m0(x, saturate, round_mode).astype(dtype)
    return x.astype(dtype)


class Cast_6(Kernel):
    attributes = {"to": REQUIRED}
    saturate, round_mode = 1, "up"

    def setup(self):
        target_dtype(self.to)

    def run(self, x):
        return (self.xp.asarray(cast(self.host(x), self.to, bool(self.saturate), self.round_mode)),)


class Cast_19(Cast_6):
    attributes = {"to": REQUIRED, "saturate": 1}


class Cast_24(Cast_6):
    attributes = {"to": REQUIRED, "saturate": 1, "round_mode": "up"}
