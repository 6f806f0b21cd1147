"""The worker-side ONNX guards on models they must accept, and their caps at the edges.

Accepted models are run by onnxruntime (the reference) from the bytes the guard returns,
so inlining external data is checked by value, not by inspection."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from rtd.errors import Code, RtdError
from rtd.kernels.ops.base import supported
from rtd.loader import onnx_wire
from rtd.loader.onnx_guard import GuardLimits, check_model

from loader_models import add_model


def _run(model, x):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _externalise(model_bytes: bytes, offset: int):
    model = helper.make_model(helper.make_graph([], "g", [], []))
    model.ParseFromString(model_bytes)
    tensor = model.graph.initializer[0]
    raw = tensor.raw_data
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "weights.bin"), ("offset", str(offset)), ("length", str(len(raw)))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return model.SerializeToString(), b"\xee" * offset + raw + b"\xee" * 8


def test_plain_model_passes_the_executors_allow_list():
    model = check_model(add_model(), allowed_ops=set(supported()))
    x = np.ones((1, 4), np.float32)
    np.testing.assert_array_equal(_run(model, x), x + np.arange(4, dtype=np.float32))


def test_external_data_from_a_signed_sibling_is_inlined():
    weights = np.array([[5, 6, 7, 8]], np.float32)
    model_bytes, blob = _externalise(add_model(weights), offset=24)
    with pytest.raises(RtdError) as e:
        check_model(model_bytes)   # refused by default
    assert e.value.code is Code.E_ONNX_EXTERNAL_DATA
    model = check_model(model_bytes, external={"weights.bin": memoryview(blob)})
    tensor = model.graph.initializer[0]
    assert not tensor.external_data and tensor.data_location == TensorProto.DEFAULT
    x = np.ones((1, 4), np.float32)
    np.testing.assert_array_equal(_run(model, x), x + weights)


def test_external_length_must_equal_dims_times_size():
    model_bytes, blob = _externalise(add_model(), offset=0)
    model_bytes = model_bytes.replace(b"length\x12\x0216", b"length\x12\x0212")
    with pytest.raises(RtdError) as e:
        check_model(model_bytes, external={"weights.bin": blob})
    assert e.value.code is Code.E_ONNX_EXTERNAL_DATA


def _if_model(depth: int) -> bytes:
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    body = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "leaf", [], [y])
    for level in range(depth):
        node = helper.make_node("If", ["c"], ["y"], then_branch=body, else_branch=body)
        body = helper.make_graph([node], f"g{level}", [], [y])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    c = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    main = helper.make_graph(list(body.node), "main", [x, c], [y])
    return helper.make_model(main, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_nesting_cap_is_exact():
    assert onnx_wire.scan(memoryview(_if_model(4)), max_depth=16, max_nodes=100) == (1 + 2 * 15, 4)
    check_model(_if_model(4), limits=GuardLimits(max_graph_depth=4))
    with pytest.raises(RtdError) as e:
        check_model(_if_model(5), limits=GuardLimits(max_graph_depth=4))
    assert e.value.code is Code.E_ONNX_LIMIT


def test_node_cap():
    nodes = [helper.make_node("Identity", ["x"], ["y"])] + [
        helper.make_node("Identity", ["x"], [f"t{i}"]) for i in range(20)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    data = helper.make_model(helper.make_graph(nodes, "g", [x], [y])).SerializeToString()
    check_model(data, limits=GuardLimits(max_nodes=21))
    with pytest.raises(RtdError) as e:
        check_model(data, limits=GuardLimits(max_nodes=20))
    assert e.value.code is Code.E_ONNX_LIMIT


def test_local_functions_without_recursion_are_accepted():
    inner = helper.make_function("local", "inner", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])],
                                 [helper.make_opsetid("", 17)])
    outer = helper.make_function("local", "outer", ["a"], ["b"],
                                 [helper.make_node("inner", ["a"], ["b"], domain="local")],
                                 [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("outer", ["x"], ["y"], domain="local")], "g", [x], [y])
    model = check_model(helper.make_model(graph, functions=[inner, outer], opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]).SerializeToString())
    x_value = np.array([[-1, 2, -3, 4]], np.float32)
    np.testing.assert_array_equal(_run(model, x_value), np.maximum(x_value, 0))


def test_typed_field_counts_are_checked():
    good = helper.make_tensor("w", TensorProto.FLOAT, [2, 2], [1.0, 2.0, 3.0, 4.0])
    bad = helper.make_tensor("w", TensorProto.FLOAT, [2, 2], [1.0, 2.0, 3.0, 4.0])
    bad.float_data.append(5.0)
    for tensor, ok in ((good, True), (bad, False)):
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])
        graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g", [x], [y], [tensor])
        data = helper.make_model(graph).SerializeToString()
        if ok:
            check_model(data)
        else:
            with pytest.raises(RtdError) as e:
                check_model(data)
            assert e.value.code is Code.E_ONNX_INVALID


def test_constant_of_shape_under_the_cap_is_accepted():
    shape = numpy_helper.from_array(np.array([2, 3], np.int64), "shape")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("ConstantOfShape", ["shape"], ["z"]),
                               helper.make_node("Add", ["x", "z"], ["y"])], "g", [x], [y], [shape])
    check_model(helper.make_model(graph).SerializeToString(), limits=GuardLimits(max_constant_of_shape_bytes=24))
    with pytest.raises(RtdError):
        check_model(helper.make_model(graph).SerializeToString(), limits=GuardLimits(max_constant_of_shape_bytes=23))


def test_training_info_graphs_are_guarded_too():
    model = helper.make_model(helper.make_graph([], "g", [], []))
    model.ParseFromString(add_model())
    algorithm = helper.make_graph([helper.make_node("Exec", [], ["z"], domain="com.evil")], "train", [], [])
    model.training_info.add(algorithm=algorithm)
    with pytest.raises(RtdError) as e:
        check_model(model.SerializeToString())
    assert e.value.code is Code.E_ONNX_OP_FORBIDDEN


def test_a_declared_but_unused_domain_is_accepted_and_a_used_one_named_with_its_opset():
    model = helper.make_model(helper.make_graph([], "g", [], []))
    model.ParseFromString(add_model())
    for domain, version in (("ai.onnx.ml", 2), ("com.microsoft.nchwc", 1), ("com.evil", 1)):
        model.opset_import.add(domain=domain, version=version)
    accepted = check_model(model.SerializeToString())
    x = np.ones((1, 4), np.float32)
    np.testing.assert_array_equal(_run(accepted, x), x + np.arange(4, dtype=np.float32))
    body = helper.make_function("local", "Wrap", ["a"], ["b"], [helper.make_node("Exec", ["a"], ["b"], domain="com.other")],
                                [helper.make_opsetid("com.other", 3)])
    model.functions.append(body)
    model.graph.node.append(helper.make_node("Wrap", ["y"], ["z"], domain="local"))
    with pytest.raises(RtdError) as e:
        check_model(model.SerializeToString())
    assert e.value.code is Code.E_ONNX_OP_FORBIDDEN and e.value.detail == "com.other Exec (opset 3)"


def test_views_hand_over_the_main_graphs_weights_without_a_copy():
    """raw_data found by its wire offsets is a slice of the caller's bytes (the parsed copy is
    cleared); a name two initializers share is left to the parser; subgraph weights stay."""
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((5, 7)).astype(np.float32), rng.standard_normal(7).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["X", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["Y"])],
                              "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 5])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 7])],
                              [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")])
    data = bytearray(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    views = {}
    model = check_model(data, views=views)
    assert set(views) == {"W", "b"}
    assert bytes(views["W"]) == w.tobytes() and bytes(views["b"]) == b.tobytes()
    assert views["W"].obj is data                       # a slice of the caller's buffer: no copy
    assert all(not t.HasField("raw_data") for t in model.graph.initializer)
    graph.initializer.append(numpy_helper.from_array(w * 2, "W"))   # two initializers named W
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    views = {}
    model = check_model(data, views=views)
    assert set(views) == {"b"} and sum(t.HasField("raw_data") for t in model.graph.initializer) == 2
