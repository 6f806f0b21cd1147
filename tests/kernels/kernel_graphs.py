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


def typed_model(nodes, inputs, outputs, initializers=(), opset=20, ir_version=10) -> bytes:
    """The bytes of a model over tensors of any element type: inputs/outputs [(name, TensorProto type)],
    shapes left open; initializers [(name, ndarray)]."""
    def infos(values):
        return [helper.make_tensor_value_info(n, t, None) for n, t in values]
    graph = helper.make_graph(list(nodes), "g", infos(inputs), infos(outputs),
                              [numpy_helper.from_array(v, n) for n, v in initializers])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = ir_version
    return m.SerializeToString()


def node(op, inputs, outputs, **attrs) -> onnx.NodeProto:
    return helper.make_node(op, inputs, outputs, **attrs)


def transformer_block():
    """LayerNorm (ONNX op), attention, a MatMul+bias with its GELU (Erf form), a Softmax and a
    GELU of their own, and an element-wise tail: every kind of fused step a GPU plan builds
    kernels for."""
    rng = np.random.default_rng(0)
    h = 8
    nodes = [node("LayerNormalization", ["x", "g", "b"], ["n"], axis=-1, epsilon=1e-5),
             node("Transpose", ["n"], ["nt"], perm=[0, 2, 1]),
             node("MatMul", ["n", "nt"], ["s"]), node("Mul", ["s", "scale"], ["ss"]),
             node("Softmax", ["ss"], ["p"], axis=-1), node("MatMul", ["p", "n"], ["a"]),
             node("MatMul", ["a", "w"], ["m"]), node("Add", ["m", "bias"], ["mb"]),
             node("Div", ["mb", "sqrt2"], ["d"]), node("Erf", ["d"], ["e"]), node("Add", ["e", "one"], ["e1"]),
             node("Mul", ["mb", "e1"], ["ge"]), node("Mul", ["ge", "half"], ["gelu"]),
             node("Softmax", ["x"], ["sx"], axis=-1), node("Div", ["sx", "sqrt2"], ["d2"]), node("Erf", ["d2"], ["e2"]),
             node("Add", ["e2", "one"], ["e21"]), node("Mul", ["sx", "e21"], ["ge2"]), node("Mul", ["ge2", "half"], ["gelu2"]),
             node("Sigmoid", ["gelu"], ["sg"]), node("Mul", ["sg", "gelu2"], ["out"])]
    f32 = np.float32
    initializers = [const("g", rng.standard_normal(h).astype(f32)), const("b", rng.standard_normal(h).astype(f32)),
                    const("scale", np.array(0.35, f32)), const("w", rng.standard_normal((h, h)).astype(f32)),
                    const("bias", rng.standard_normal(h).astype(f32)), const("sqrt2", np.array(np.sqrt(2), f32)),
                    const("one", np.array(1, f32)), const("half", np.array(0.5, f32))]
    return model(nodes, [("x", [2, 4, h])], [("out", None)], initializers)
