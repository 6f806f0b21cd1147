"""rtd as an onnx.backend.base.Backend, so onnx.backend.test.BackendTest runs the node and model tests
(on CPU, and on CUDA where CuPy finds a GPU)."""
import onnx.backend.base

from . import backend_cupy
from .model import compile_model


class RtdRep(onnx.backend.base.BackendRep):
    def __init__(self, model):
        self.model = model

    def run(self, inputs, **kwargs):
        if isinstance(inputs, dict):
            feeds = inputs
        else:
            feeds = {spec.name: value for spec, value in zip(self.model.inputs, inputs)}
        outputs = self.model.run(feeds)
        return tuple(outputs[spec.name] for spec in self.model.outputs)


class RtdBackend(onnx.backend.base.Backend):
    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):
        super().prepare(model, device, **kwargs)
        return RtdRep(compile_model(model, device=device.lower()))

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper() == "CPU" or (device.upper() == "CUDA" and backend_cupy.unavailable_reason() is None)


prepare = RtdBackend.prepare
run_model = RtdBackend.run_model
run_node = RtdBackend.run_node
supports_device = RtdBackend.supports_device
