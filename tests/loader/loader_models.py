"""Small ONNX models for the loader's tests, built with onnx.helper (nothing big is committed)."""
import numpy as np
from onnx import TensorProto, helper, numpy_helper


def add_model(weights=None) -> bytes:
    """y = x + w (w a 1x4 float initializer): small, and runnable by onnxruntime."""
    w = np.arange(4, dtype=np.float32).reshape(1, 4) if weights is None else weights
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g", [x], [y],
                              [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
