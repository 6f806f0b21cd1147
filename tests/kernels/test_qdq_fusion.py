"""QDQ fusion (kernels/lower/qdq.py): a static QDQ export runs as the integer ops onnxruntime's
QDQ transformer makes of it, equal to onnxruntime's optimised session bit for bit, and a group
that does not meet a fusion's conditions keeps its float path (still equal to the literal graph).
Where onnxruntime's uint8 × int8 product saturates on this host, its session gets the int8 weights
as uint8, fused alike into its exact u8u8 path (quantized_reference.py)."""
import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from rtd.kernels import compile_model
from tests.kernels.quantized_reference import onnxruntime_reference
from tests.zoo.compare import reference_session, run_reference
from tests.zoo.models import ZOO


def constant(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def qdq_conv_model(relu: bool, output_zero_point: int, second_reader: bool = False, pool: str = "MaxPool") -> bytes:
    """Q(x) → DQ → Conv(DQ(w), DQ(b)) [→ Relu] → Q → DQ → pool → Q → DQ → y (uint8 activations, int8
    per-channel weights), as onnxruntime's quantize_static writes it."""
    rng = np.random.default_rng(3)
    w = rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    w_scale = rng.uniform(0.002, 0.01, 4).astype(np.float32)
    x_scale, y_scale = np.float32(0.02), np.float32(0.05)
    bias = rng.integers(-500, 500, 4).astype(np.int32)
    inits = [constant("x_s", x_scale), constant("x_z", np.uint8(128)), constant("w_q", w), constant("w_s", w_scale),
             constant("w_z", np.zeros(4, np.int8)), constant("b_q", bias), constant("b_s", x_scale * w_scale),
             constant("b_z", np.zeros(4, np.int32)), constant("y_s", y_scale), constant("y_z", np.uint8(output_zero_point))]
    conv_out = "conv_out"
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_s", "x_z"], ["x_q"]),
             helper.make_node("DequantizeLinear", ["x_q", "x_s", "x_z"], ["x_dq"]),
             helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["w_dq"], axis=0),
             helper.make_node("DequantizeLinear", ["b_q", "b_s", "b_z"], ["b_dq"], axis=0),
             helper.make_node("Conv", ["x_dq", "w_dq", "b_dq"], [conv_out], pads=[1, 1, 1, 1])]
    if relu:
        nodes.append(helper.make_node("Relu", [conv_out], ["relu_out"]))
        conv_out = "relu_out"
    nodes += [helper.make_node("QuantizeLinear", [conv_out, "y_s", "y_z"], ["c_q"]),
              helper.make_node("DequantizeLinear", ["c_q", "y_s", "y_z"], ["c_dq"]),
              helper.make_node(pool, ["c_dq"], ["p"], **({"kernel_shape": [2, 2], "strides": [2, 2]} if pool == "MaxPool" else {})),
              helper.make_node("QuantizeLinear", ["p", "y_s", "y_z"], ["p_q"]),
              helper.make_node("DequantizeLinear", ["p_q", "y_s", "y_z"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if second_reader:   # the float conv output is read twice: the Conv cannot become QLinearConv
        nodes.append(helper.make_node("Identity", [conv_out], ["conv_float"]))
        outputs.append(helper.make_tensor_value_info("conv_float", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


def ops_run(data: bytes, feeds) -> set:
    model = compile_model(data)
    model.run(feeds)
    return set(model.plan_stats(feeds)["ops"])


def onnxruntime_outputs(data: bytes, feeds, optimized: bool) -> list:
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = (onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL if optimized
                                        else onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL)
    return onnxruntime_reference(data, options).run(feeds)


FEEDS = {"x": np.random.default_rng(5).standard_normal((1, 3, 8, 8)).astype(np.float32)}


@pytest.mark.parametrize("relu, zero_point, pool", [(False, 128, "MaxPool"), (True, 0, "MaxPool"),
                                                    (False, 128, "GlobalAveragePool")])
def test_fused_groups_run_in_eight_bits_and_equal_onnxruntime(relu, zero_point, pool):
    data = qdq_conv_model(relu, zero_point, pool=pool)
    ops = ops_run(data, FEEDS)
    assert "QLinearConv" in ops and "Conv" not in ops and "ConvActivation" not in ops, ops
    assert ("QLinearGlobalAveragePool" in ops) == (pool == "GlobalAveragePool"), ops
    got = compile_model(data).run(FEEDS)["y"]
    np.testing.assert_array_equal(got, onnxruntime_outputs(data, FEEDS, optimized=True)[0])


@pytest.mark.parametrize("relu, zero_point, second_reader", [(True, 128, False), (False, 128, True)])
def test_groups_that_do_not_qualify_keep_the_float_path(relu, zero_point, second_reader):
    """A Relu before a Q whose zero point is not the type's minimum is not redundant; a conv output
    someone else reads in float cannot be replaced by its quantized form."""
    data = qdq_conv_model(relu, zero_point, second_reader=second_reader)
    ops = ops_run(data, FEEDS)
    assert "QLinearConv" not in ops and ({"Conv", "ConvActivation"} & ops), ops
    got = compile_model(data).run(FEEDS)
    want = onnxruntime_outputs(data, FEEDS, optimized=False)
    np.testing.assert_allclose(got["y"], want[0], atol=0.05 + 1e-6)   # at most one output quantum apart


def test_the_zoo_qdq_export_equals_onnxruntime_exactly():
    zoo = ZOO["cnn_qdq"]
    for dims in zoo.dims:
        feeds = zoo.feeds(np.random.default_rng(11), dims)
        got = compile_model(zoo.path()).run(feeds)
        for optimized in (False, True):
            want = run_reference(reference_session(zoo.path(), 1, optimized), feeds)
            for name, value in want.items():
                np.testing.assert_array_equal(got[name], value)
