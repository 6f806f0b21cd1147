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


def test_a_depthwise_model_is_served_by_a_confined_worker(daemon):
    model = depthwise_relu()
    client = tc.InferenceServerClient(daemon.url())
    headers = {"authorization": f"Bearer {daemon.tokens['acme']}"}
    files = {f"file:{path}": data for path, data in daemon.package("acme", model, "depthwise").items()}
    client.load_model("depthwise", headers=headers, files=files)
    x = np.random.default_rng(5).standard_normal((1, 16, 20, 20), dtype=np.float32)
    given = tc.InferInput("X", [1, 16, 20, 20], "FP32")
    given.set_data_from_numpy(x)
    y = client.infer("depthwise", [given], headers=headers).as_numpy("Y")
    expected = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
    client.unload_model("depthwise", headers=headers)
    assert "compiled CPU kernels unavailable" not in daemon.read_log()   # the zygote loaded them
