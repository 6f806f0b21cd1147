"""PyTriton's side of bench/peers.py: Triton Inference Server (the nvidia-pytriton wheel's own
`tritonserver`, its Python backend stub and PyTriton's proxy) serving ONNX files with onnxruntime
in this process, one instance per model, 1 intra-op thread, no batching. Runs in the peer's own
virtualenv (.bench-venvs/pytriton):

    python bench/peers_pytriton.py SPEC.json

SPEC: {"grpc_port", "http_port", "metrics_port", "models": [{"name", "path", "inputs": [[name,
dtype, shape]], "outputs": [...]}]}, the shapes the exact ones the benchmark sends and gets back.
"""
import json
import sys

import numpy as np
import onnxruntime
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig


def infer_function(path: str):
    """Triton's callable for one model: a list of requests in, one dict of outputs per request out."""
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    input_names = [i.name for i in session.get_inputs()]
    output_names = [o.name for o in session.get_outputs()]

    def infer(requests):
        return [dict(zip(output_names, session.run(output_names, {name: request[name] for name in input_names})))
                for request in requests]
    return infer


def tensors(specs: list) -> list[Tensor]:
    return [Tensor(name=name, dtype=np.dtype(dtype), shape=tuple(shape)) for name, dtype, shape in specs]


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    config = TritonConfig(grpc_port=spec["grpc_port"], http_port=spec["http_port"], metrics_port=spec["metrics_port"],
                          log_verbose=0)
    with Triton(config=config) as triton:
        for model in spec["models"]:
            triton.bind(model_name=model["name"], infer_func=infer_function(model["path"]), inputs=tensors(model["inputs"]),
                        outputs=tensors(model["outputs"]), config=ModelConfig(batching=False))
        triton.serve()


if __name__ == "__main__":
    main()
