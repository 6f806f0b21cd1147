"""compile_model: ONNX bytes (or a path) → a CompiledModel with `inputs`, `outputs` and `run`."""
import dataclasses
import os

import numpy as np
import onnx

from rtd.errors import Code, RtdError

from .graph import GraphRunner


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: np.dtype | None  # None for sequence/optional types
    shape: tuple  # ints for fixed dims, str for symbolic ones, None for unknown


def _spec(value: onnx.ValueInfoProto) -> TensorSpec:
    t = value.type.tensor_type
    if not value.type.HasField("tensor_type"):
        return TensorSpec(value.name, None, ())
    dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)) if t.elem_type else None
    shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim)
    return TensorSpec(value.name, dtype, shape)


def _parse(model) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (str, os.PathLike)):
        with open(model, "rb") as f:
            model = f.read()
    try:
        return onnx.ModelProto.FromString(bytes(model))
    except Exception as e:  # protobuf raises DecodeError and friends
        raise RtdError(Code.E_ONNX_PARSE, str(e)[:200]) from None


class CompiledModel:
    def __init__(self, proto: onnx.ModelProto, device: str = "cpu"):
        if device != "cpu":
            raise RtdError(Code.E_OP_UNSUPPORTED, f"device {device!r} not available")
        opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in proto.opset_import}
        self.runner = GraphRunner(proto.graph, opsets)
        initializers = {t.name for t in proto.graph.initializer}
        self.inputs = [_spec(v) for v in proto.graph.input if v.name not in initializers]
        self.outputs = [_spec(v) for v in proto.graph.output]

    def run(self, feeds: dict) -> dict:
        expected = {spec.name: spec for spec in self.inputs}
        if set(feeds) != set(expected):
            raise RtdError(Code.E_INPUT_INVALID, f"expected inputs {sorted(expected)}, got {sorted(feeds)}")
        values = self.runner(feeds)
        return {spec.name: value for spec, value in zip(self.outputs, values)}


def compile_model(model, device: str = "cpu", **options) -> CompiledModel:
    return CompiledModel(_parse(model), device, **options)
