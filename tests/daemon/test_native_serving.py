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


def wide_conv_chain() -> bytes:
    """A 3×3 convolution of 16 → 32 channels over 128×128 and a fused chain after it: past the thread
    thresholds, so a tenant granted two cores runs it on the kernels' thread pool."""
    rng = np.random.default_rng(9)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["X", "W", "B"], ["C"], pads=[1, 1, 1, 1]),
         helper.make_node("Add", ["C", "three"], ["A"]), helper.make_node("Relu", ["A"], ["R"]),
         helper.make_node("Mul", ["R", "C"], ["Y"])], "wide",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 16, 128, 128])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 32, 128, 128])],
        [numpy_helper.from_array(rng.standard_normal((32, 16, 3, 3), dtype=np.float32), "W"),
         numpy_helper.from_array(rng.standard_normal(32, dtype=np.float32), "B"),
         numpy_helper.from_array(np.full(1, 3.0, np.float32), "three")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_a_tenant_storming_its_threaded_kernels_leaves_the_other_tenant_unharmed(tmp_path):
    """beta, granted two cores (the kernels' pool at two threads), floods its wide convolution from
    eight callers, half of them with 1 ms deadlines, while a ninth unloads and reloads the model under
    them; acme's answers stay exact and its worker is never restarted, and beta's model answers
    correctly afterwards."""
    import threading
    import time

    from rtd.errors import RtdError
    from tests.daemon.conftest import Daemon, mlp

    daemon = Daemon(tmp_path, policies={"beta": {"cpu_cores": 2.0}}).start()
    try:
        calm_model, wide = mlp(7), wide_conv_chain()
        acme, beta = daemon.client("acme"), daemon.client("beta")
        acme.load("calm", daemon.package("acme", calm_model, "calm"))
        beta.load("wide", daemon.package("beta", wide, "wide"))
        x_calm = np.random.default_rng(1).standard_normal((2, 4), dtype=np.float32)
        want_calm = onnxruntime.InferenceSession(calm_model, providers=["CPUExecutionProvider"]).run(None, {"X": x_calm})[0]
        x_wide = np.random.default_rng(2).standard_normal((1, 16, 128, 128), dtype=np.float32)
        want_wide = onnxruntime.InferenceSession(wide, providers=["CPUExecutionProvider"]).run(None, {"X": x_wide})[0]
        stop, codes, lock = threading.Event(), {}, threading.Lock()

        def flood(deadline):
            client = daemon.client("beta")
            while not stop.is_set():
                try:
                    client.infer("wide", {"X": x_wide}, timeout=deadline)
                except RtdError as e:   # deadlines, and the model gone between unload and reload
                    with lock:
                        codes[e.code.name] = codes.get(e.code.name, 0) + 1

        def reload():
            client = daemon.client("beta")
            counter = 1
            while not stop.is_set():
                try:
                    client.unload("wide")
                    counter += 1
                    client.load("wide", daemon.package("beta", wide, "wide", counter=counter))
                except RtdError as e:
                    with lock:
                        codes[e.code.name] = codes.get(e.code.name, 0) + 1
        workers = [threading.Thread(target=flood, args=(0.001 if i % 2 else None,)) for i in range(8)]
        workers.append(threading.Thread(target=reload))
        for w in workers:
            w.start()
        calm_answers, started = 0, time.monotonic()
        try:
            while time.monotonic() - started < 8:
                got = acme.infer("calm", {"X": x_calm})["Y"]
                np.testing.assert_allclose(got, want_calm, rtol=1e-5, atol=1e-6)
                calm_answers += 1
        finally:
            stop.set()
            for w in workers:
                w.join(timeout=60)
        assert calm_answers > 10 and codes, (calm_answers, codes)
        assert not [line for line in daemon.read_log().splitlines() if "tenant=acme" in line and "crash" in line]
        for _ in range(30):   # beta's model answers exactly once the storm is over (a reload may still be settling)
            try:
                got = daemon.client("beta").infer("wide", {"X": x_wide}, timeout=60)["Y"]
                break
            except RtdError:
                time.sleep(0.5)
        np.testing.assert_allclose(got, want_wide, rtol=1e-4, atol=1e-3)
    finally:
        assert daemon.stop() == 0, daemon.read_log()
