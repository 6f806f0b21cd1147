"""A depthwise Conv+Relu served by the daemon: the zygote's workers run the compiled kernel they
inherited (loaded before fork and seccomp) and answer what onnxruntime answers."""
import numpy as np
import onnxruntime
import pytest
import tritonclient.grpc as tc
from onnx import TensorProto, helper, numpy_helper

from rtd.kernels import native

pytestmark = pytest.mark.skipif(native.compiled is None, reason="rtd was installed without its compiled kernels")


def depthwise_relu(c: int = 16) -> bytes:
    rng = np.random.default_rng(4)
    nodes = [helper.make_node("Conv", ["X", "W", "B"], ["C"], group=c, kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["C"], ["Y"])]
    graph = helper.make_graph(nodes, "depthwise", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, c, 20, 20])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, c, 20, 20])],
                              [numpy_helper.from_array(rng.standard_normal((c, 1, 3, 3), dtype=np.float32), "W"),
                               numpy_helper.from_array(rng.standard_normal(c, dtype=np.float32), "B")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def loaded(daemon, model: bytes, name: str):
    """tritonclient and tenant acme's headers, `model` loaded as `name` from a signed package."""
    client = tc.InferenceServerClient(daemon.url())
    headers = {"authorization": f"Bearer {daemon.tokens['acme']}"}
    files = {f"file:{path}": data for path, data in daemon.package("acme", model, name).items()}
    client.load_model(name, headers=headers, files=files)
    return client, headers


def test_a_depthwise_model_is_served_by_a_confined_worker(daemon):
    model = depthwise_relu()
    client, headers = loaded(daemon, model, "depthwise")
    x = np.random.default_rng(5).standard_normal((1, 16, 20, 20), dtype=np.float32)
    given = tc.InferInput("X", [1, 16, 20, 20], "FP32")
    given.set_data_from_numpy(x)
    y = client.infer("depthwise", [given], headers=headers).as_numpy("Y")
    expected = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
    client.unload_model("depthwise", headers=headers)
    assert "compiled CPU kernels unavailable" not in daemon.read_log()   # the zygote loaded them


def control_flow_model() -> bytes:
    """An If whose branch holds a Conv, a fused element-wise chain and an LSTM: the compiled
    convolution, chain interpreter and recurrence, inside a planned subgraph, in a confined worker."""
    rng = np.random.default_rng(8)
    weights = {"W": rng.standard_normal((8, 4, 3, 3), dtype=np.float32), "B": rng.standard_normal(8, dtype=np.float32),
               "three": np.full(1, 3.0, np.float32), "six": np.full(1, 6.0, np.float32),
               "LW": rng.standard_normal((1, 32, 8), dtype=np.float32) * 0.3,
               "LR": rng.standard_normal((1, 32, 8), dtype=np.float32) * 0.3,
               "shape": np.array([256, 1, 8], np.int64)}
    branch = helper.make_graph(
        [helper.make_node("Conv", ["X", "W", "B"], ["C"], pads=[1, 1, 1, 1]),
         helper.make_node("Add", ["C", "three"], ["A"]), helper.make_node("Relu", ["A"], ["R"]),
         helper.make_node("Mul", ["R", "C"], ["M"]), helper.make_node("Div", ["M", "six"], ["Y"]),
         helper.make_node("Reshape", ["Y", "shape"], ["S"]),
         helper.make_node("LSTM", ["S", "LW", "LR"], ["H", "Z"], hidden_size=8)],
        "branch", [], [helper.make_tensor_value_info("Z", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("ReduceMean", ["X"], ["Z"], keepdims=0)], "other", [],
                              [helper.make_tensor_value_info("Z", TensorProto.FLOAT, None)])
    graph = helper.make_graph(
        [helper.make_node("If", ["flag"], ["Out"], then_branch=branch, else_branch=other)], "controlled",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 4, 16, 16]),
         helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("Out", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_control_flow_with_compiled_kernels_is_served_by_a_confined_worker(daemon):
    model = control_flow_model()
    client, headers = loaded(daemon, model, "controlled")
    reference = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    for seed in (1, 2):   # the first run plans the branch, the second runs the plan
        x = np.random.default_rng(seed).standard_normal((1, 4, 16, 16), dtype=np.float32)
        given = [tc.InferInput("X", [1, 4, 16, 16], "FP32"), tc.InferInput("flag", [], "BOOL")]
        given[0].set_data_from_numpy(x)
        given[1].set_data_from_numpy(np.array(True))
        out = client.infer("controlled", given, headers=headers).as_numpy("Out")
        expected = reference.run(None, {"X": x, "flag": np.array(True)})[0]
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
    client.unload_model("controlled", headers=headers)
