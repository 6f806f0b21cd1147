"""Small ONNX graphs for the kernels tests, built with onnx.helper (no files)."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def const(name: str, value) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def model(nodes, inputs, outputs, initializers=(), opset=17, functions=()) -> onnx.ModelProto:
    """inputs/outputs: [(name, shape)] float tensors, or ValueInfoProtos as they are."""
    def info(v):
        return v if isinstance(v, onnx.ValueInfoProto) else helper.make_tensor_value_info(v[0], F, v[1])
    graph = helper.make_graph(nodes, "g", [info(v) for v in inputs], [info(v) for v in outputs], list(initializers))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)] +
                          [helper.make_opsetid(d, 1) for d in {f.domain for f in functions}], functions=list(functions))
    m.ir_version = 8
    return m


def node(op, inputs, outputs, **attrs) -> onnx.NodeProto:
    return helper.make_node(op, inputs, outputs, **attrs)
