"""MLServer's side of bench/peers.py: a custom runtime that serves one ONNX file with onnxruntime
(1 intra-op thread, 1 inter-op thread). MLServer's inference-pool worker imports it from the
peer's own virtualenv (.bench-venvs/mlserver, PYTHONPATH=bench/); rtd's venv never does.
"""
import onnxruntime
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse


class OnnxRuntimeModel(MLModel):
    async def load(self) -> bool:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(self.settings.parameters.uri, options, providers=["CPUExecutionProvider"])
        self.output_names = [output.name for output in self.session.get_outputs()]
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        feeds = {tensor.name: NumpyCodec.decode_input(tensor) for tensor in payload.inputs}
        values = self.session.run(self.output_names, feeds)
        return InferenceResponse(model_name=self.name, outputs=[NumpyCodec.encode_output(name, value)
                                                                for name, value in zip(self.output_names, values)])
