"""CastLike: Cast to the element type of a second input (saturate from 19, round_mode from 24)."""
from onnx import TensorProto, helper

from .base import Kernel
from .op_cast import cast


class CastLike_15(Kernel):
    saturate, round_mode = 1, "up"

    def run(self, x, like):
        to = TensorProto.STRING if like.dtype == object else helper.np_dtype_to_tensor_dtype(like.dtype)
        return (self.xp.asarray(cast(self.host(x), to, bool(self.saturate), self.round_mode)),)


class CastLike_19(CastLike_15):
    attributes = {"saturate": 1}


class CastLike_24(CastLike_15):
    attributes = {"saturate": 1, "round_mode": "up"}
