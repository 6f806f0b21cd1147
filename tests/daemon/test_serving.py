"""End to end against a real `rtd serve`: an unmodified tritonclient drives a tenant's whole
life cycle; tenants are isolated; every malformed or unauthenticated request is refused
with a clear status and changes nothing. Results are checked against onnxruntime."""
import json
import os
import subprocess
import sys

import numpy as np
import onnxruntime
import pytest
import tritonclient.grpc as tc
from tritonclient.utils import InferenceServerException

from rtd.errors import Code, RtdError
from rtd.loader import pack
from tests.daemon.conftest import mlp

RTCTL = os.path.join(os.path.dirname(sys.executable), "rtctl")


def reference(model: bytes, feeds: dict) -> dict:
    session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


def triton(daemon, tenant: str) -> tuple[tc.InferenceServerClient, dict]:
    return tc.InferenceServerClient(daemon.url()), {"authorization": f"Bearer {daemon.tokens[tenant]}"}


def status_of(excinfo) -> str:
    return excinfo.value.status()


def test_tritonclient_life_cycle(daemon):
    client, headers = triton(daemon, "acme")
    model = mlp(1)
    files = {f"file:{path}": data for path, data in daemon.package("acme", model, "mlp").items()}
    assert client.is_server_live() and client.is_server_ready()
    client.load_model("mlp", headers=headers, files=files)
    assert client.is_model_ready("mlp", headers=headers)
    meta = client.get_model_metadata("mlp", headers=headers)
    assert meta.name == "mlp" and meta.versions == ["1"]
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.inputs] == [("X", "FP32", [-1, 4])]
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.outputs] == [("Y", "FP32", [-1, 3])]
    x = np.random.default_rng(2).standard_normal((5, 4)).astype(np.float32)
    given = tc.InferInput("X", [5, 4], "FP32")
    given.set_data_from_numpy(x)
    result = client.infer("mlp", [given], headers=headers, request_id="r1")
    np.testing.assert_allclose(result.as_numpy("Y"), reference(model, {"X": x})["Y"], rtol=1e-5, atol=1e-6)
    assert result.get_response().id == "r1"
    config = client.get_model_config("mlp", headers=headers).config
    assert config.name == "mlp" and config.input[0].name == "X"
    index = client.get_model_repository_index(headers=headers)
    assert [(m.name, m.state) for m in index.models] == [("mlp", "READY")]
    client.unload_model("mlp", headers=headers)
    assert not client.is_model_ready("mlp", headers=headers)
    with pytest.raises(InferenceServerException) as e:
        client.infer("mlp", [given], headers=headers)
    assert status_of(e) == "StatusCode.NOT_FOUND"


def test_server_metadata_advertises_only_what_is_implemented(daemon):
    client, _ = triton(daemon, "acme")
    meta = client.get_server_metadata()
    assert meta.name == "rtd" and set(meta.extensions) == {"model_repository", "model_configuration", "binary_tensor_data"}
    with pytest.raises(InferenceServerException) as e:
        client.get_system_shared_memory_status()
    assert status_of(e) == "StatusCode.UNIMPLEMENTED"


def test_rtctl_load_and_run(daemon, tmp_path):
    model = mlp(3)
    pack.write_package(daemon.package("beta", model, "cli"), str(tmp_path / "cli.tar"), "cli")
    token = tmp_path / "token"
    token.write_text(daemon.tokens["beta"])
    conn = ["--socket", daemon.socket, "--token-file", str(token)]
    done = subprocess.run([RTCTL, "load", str(tmp_path / "cli.tar"), *conn], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.save(tmp_path / "x.npy", x)
    done = subprocess.run([RTCTL, "run", "cli", "--input", f"X={tmp_path / 'x.npy'}", "--output-dir", str(tmp_path / "out"),
                           "--json", *conn], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    want = reference(model, {"X": x})["Y"]
    np.testing.assert_allclose(np.array(json.loads(done.stdout)["outputs"]["Y"]["data"]), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.load(tmp_path / "out" / "Y.npy"), want, rtol=1e-5, atol=1e-6)
    listed = subprocess.run([RTCTL, "list", "--json", *conn], capture_output=True, text=True, timeout=60)
    assert {"name": "cli", "version": "1", "state": "READY", "reason": ""} in json.loads(listed.stdout)
    refused = subprocess.run([RTCTL, "run", "nope", "--input", f"X={tmp_path / 'x.npy'}", *conn],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and refused.stderr.startswith("E_MODEL_NOT_FOUND:")


def test_tenants_with_the_same_model_name_see_only_their_own(daemon):
    x = np.ones((1, 4), np.float32)
    for tenant, seed in (("acme", 10), ("beta", 20)):
        daemon.client(tenant).load("shared", daemon.package(tenant, mlp(seed), "shared"))
    for tenant, seed in (("acme", 10), ("beta", 20)):
        got = daemon.client(tenant).infer("shared", {"X": x})["Y"]
        np.testing.assert_allclose(got, reference(mlp(seed), {"X": x})["Y"], rtol=1e-5, atol=1e-6)
    daemon.client("acme").load("acme_only", daemon.package("acme", mlp(11), "acme_only"))
    assert "acme_only" not in [m.name for m in daemon.client("beta").index()]
    with pytest.raises(RtdError) as e:
        daemon.client("beta").infer("acme_only", {"X": x})
    assert e.value.code == Code.E_MODEL_NOT_FOUND
    client, headers = triton(daemon, "beta")
    with pytest.raises(InferenceServerException) as e:
        client.get_model_metadata("acme_only", headers=headers)
    assert status_of(e) == "StatusCode.NOT_FOUND"
    assert not client.is_model_ready("acme_only", headers=headers)


def test_a_package_signed_by_another_tenant_is_refused(daemon):
    with pytest.raises(RtdError) as e:
        daemon.client("beta").load("stolen", daemon.package("acme", mlp(1), "stolen"))
    assert e.value.code == Code.E_KEY_UNTRUSTED


@pytest.mark.parametrize("headers", [{}, {"authorization": "Bearer wrong-token-wrong-token-wrong"}, {"authorization": "Basic eA=="}])
def test_wrong_or_missing_token(daemon, headers):
    client = tc.InferenceServerClient(daemon.url())
    with pytest.raises(InferenceServerException) as e:
        client.get_model_repository_index(headers=headers)
    assert status_of(e) == "StatusCode.UNAUTHENTICATED"
    with pytest.raises(RtdError) as e:
        daemon.client("acme").status("not-the-admin-token")
    assert e.value.code == Code.E_UNAUTHENTICATED


@pytest.fixture(scope="module")
def typed(daemon):
    daemon.client("acme").load("typed", daemon.package("acme", mlp(5), "typed"))
    return daemon.client("acme")


@pytest.mark.parametrize("inputs, code", [
    ({"X": np.ones((2, 5), np.float32)}, Code.E_INPUT_INVALID),        # shape mismatch
    ({"X": np.ones((2, 4), np.float64)}, Code.E_INPUT_INVALID),        # wrong dtype
    ({}, Code.E_INPUT_INVALID),                                        # missing input
    ({"X": np.ones((2, 4), np.float32), "Q": np.ones(1, np.float32)}, Code.E_INPUT_INVALID),  # unknown input
])
def test_malformed_requests_refused(typed, inputs, code):
    with pytest.raises(RtdError) as e:
        typed.infer("typed", inputs)
    assert e.value.code == code and code.status == "INVALID_ARGUMENT"
    np.testing.assert_equal(typed.infer("typed", {"X": np.zeros((1, 4), np.float32)})["Y"].shape, (1, 3))


def test_bytes_that_do_not_match_the_shape(typed, daemon):
    from rtd.proto import grpc_service_pb2 as pb
    request = pb.ModelInferRequest(model_name="typed", inputs=[pb.ModelInferRequest.InferInputTensor(
        name="X", datatype="FP32", shape=[1 << 20, 1 << 10])], raw_input_contents=[b"\0" * 16])
    with pytest.raises(RtdError) as e:
        typed.call("ModelInfer", request)
    assert e.value.code == Code.E_REQUEST_INVALID
    request.inputs[0].shape[:] = [2, 4]
    with pytest.raises(RtdError) as e:
        typed.call("ModelInfer", request)
    assert e.value.code == Code.E_REQUEST_INVALID and "needs 32" in e.value.detail


def test_oversize_message_is_refused_by_the_bounded_transport(typed):
    with pytest.raises(RtdError) as e:
        typed.infer("typed", {"X": np.ones((1 << 21, 4), np.float32)})  # 32 MiB > the 16 MiB bound
    assert e.value.code == Code.E_MESSAGE_TOO_LARGE and e.value.code.status == "RESOURCE_EXHAUSTED"
    assert "the limit is 16777216" in e.value.detail   # refused from its prefix, before the body was taken


def test_tampered_package_refused_and_nothing_changes(daemon):
    client = daemon.client("acme")
    client.load("keep", daemon.package("acme", mlp(7), "keep"))
    before = [(m.name, m.version, m.state) for m in client.index()]
    tampered = daemon.package("acme", mlp(8), "keep", counter=2)
    model = bytearray(tampered["2/model.onnx"])
    model[-5] ^= 0x01
    tampered["2/model.onnx"] = bytes(model)
    with pytest.raises(RtdError) as e:
        client.load("keep", tampered)
    assert e.value.code == Code.E_DIGEST_MISMATCH
    assert [(m.name, m.version, m.state) for m in client.index()] == before
    x = np.ones((1, 4), np.float32)
    np.testing.assert_allclose(client.infer("keep", {"X": x})["Y"], reference(mlp(7), {"X": x})["Y"], rtol=1e-5, atol=1e-6)
    assert daemon.registry()["acme"]["keep"]["counter"] == 1


def test_rollback_to_an_older_counter_is_refused(daemon):
    client = daemon.client("beta")
    client.load("roll", daemon.package("beta", mlp(1), "roll", counter=3))
    with pytest.raises(RtdError) as e:
        client.load("roll", daemon.package("beta", mlp(2), "roll", counter=2))
    assert e.value.code == Code.E_ROLLBACK


def test_unsigned_config_override_refused(daemon):
    client, headers = triton(daemon, "acme")
    files = {f"file:{p}": d for p, d in daemon.package("acme", mlp(1), "cfg").items()}
    with pytest.raises(InferenceServerException) as e:
        client.load_model("cfg", headers=headers, files=files, config=json.dumps({"max_batch_size": 8}))
    assert status_of(e) == "StatusCode.INVALID_ARGUMENT" and "E_CONFIG_INVALID" in e.value.message()
    assert not client.is_model_ready("cfg", headers=headers)


BATCHED_CONFIG = b"""
name: "batched"
max_batch_size: 8
input [{ name: "X" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "Y" data_type: TYPE_FP32 dims: [3] }]
dynamic_batching { max_queue_delay_microseconds: 500000 }
"""


def test_dynamic_batching_runs_concurrent_requests_as_one_execution(daemon):
    import concurrent.futures
    model = mlp(9)
    daemon.client("beta").load("batched", daemon.package("beta", model, "batched", config=BATCHED_CONFIG))
    meta = daemon.client("beta").metadata_of("batched")
    assert list(meta.inputs[0].shape) == [-1, 4]
    xs = [np.random.default_rng(i).standard_normal((i % 2 + 1, 4)).astype(np.float32) for i in range(4)]
    executions = 'nv_inference_exec_count{model="batched",tenant="beta"'
    before = daemon.metric(executions)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda x: daemon.client("beta").infer("batched", {"X": x})["Y"], xs))
    for x, got in zip(xs, results):
        np.testing.assert_allclose(got, reference(model, {"X": x})["Y"], rtol=1e-5, atol=1e-6)
    assert daemon.metric(executions) - before < 4
    with pytest.raises(RtdError) as e:
        daemon.client("beta").infer("batched", {"X": np.ones((9, 4), np.float32)})
    assert e.value.code == Code.E_INPUT_INVALID


def test_a_model_outside_the_op_allow_list_is_refused_inside_the_worker(daemon):
    from onnx import TensorProto, helper
    graph = helper.make_graph([helper.make_node("Foo", ["X"], ["Y"], domain="com.evil")], "evil",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.evil", 1)])
    client = daemon.client("beta")
    before = [(m.name, m.state) for m in client.index()]
    pids = daemon.pids("beta")
    with pytest.raises(RtdError) as e:
        client.load("evil", daemon.package("beta", model.SerializeToString(), "evil"))
    assert e.value.code == Code.E_ONNX_OP_FORBIDDEN
    assert [(m.name, m.state) for m in client.index()] == before
    assert daemon.pids("beta") == pids   # a refusal, not a crash: no other instance was touched
    assert daemon.metric('rtd_instance_ends_total{') == 0
    assert daemon.metric('rtd_verification_refusals_total{code="E_ONNX_OP_FORBIDDEN",tenant="beta"}') >= 1


def test_an_exporters_model_loads_and_serves(daemon):
    """-1 and absent dims, a 4096-character dim name, a 330-character output expression and
    opset domains declared for nothing: packed, loaded into a confined worker, run like onnxruntime;
    an op rtd lacks is refused at load, named."""
    from onnx import TensorProto, helper
    name, expression = "h" * 4096, " + ".join(f"floor((width_{i} - 1)/2)" for i in range(14))[:330]
    graph = helper.make_graph([helper.make_node("Sigmoid", ["x"], ["y"])], "exported",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, name, None])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 3, expression, None])])
    opsets = [helper.make_opsetid(d, v) for d, v in (("", 12), ("com.microsoft.nchwc", 1), ("ai.onnx.ml", 2))]
    model = helper.make_model(graph, ir_version=7, opset_imports=opsets).SerializeToString()
    client, headers = triton(daemon, "acme")
    files = daemon.package("acme", model, "exported")
    assert json.loads(files["1/metadata.json"])["outputs"][0]["shape"] == [None, 3, expression, None]
    client.load_model("exported", headers=headers, files={f"file:{p}": data for p, data in files.items()})
    meta = client.get_model_metadata("exported", headers=headers)
    assert [(t.name, list(t.shape)) for t in meta.inputs] == [("x", [-1, 3, -1, -1])]
    x = np.random.default_rng(4).standard_normal((1, 3, 48, 192)).astype(np.float32)
    given = tc.InferInput("x", list(x.shape), "FP32")
    given.set_data_from_numpy(x)
    got = client.infer("exported", [given], headers=headers).as_numpy("y")
    np.testing.assert_allclose(got, reference(model, {"x": x})["y"], rtol=1e-6, atol=1e-7)
    client.unload_model("exported", headers=headers)
    unclaimed = helper.make_node("WordConvEmbedding", ["x"], ["y"], domain="com.microsoft")
    del graph.node[:]
    graph.node.append(unclaimed)
    model = helper.make_model(graph, ir_version=7, opset_imports=[*opsets, helper.make_opsetid("com.microsoft", 1)])
    with pytest.raises(RtdError) as e:
        daemon.client("acme").load("contrib", daemon.package("acme", model.SerializeToString(), "contrib"))
    assert e.value.code == Code.E_ONNX_OP_FORBIDDEN and "com.microsoft WordConvEmbedding (opset 1)" in str(e.value)


def test_a_model_the_executor_cannot_run_is_refused_at_load_not_at_first_inference(daemon):
    """DeformConv over 3-D volumes compiles (op and attributes are claimed) but has no kernel
    for rank 5: the worker's warm-up finds it, so the load is refused naming the op."""
    from onnx import TensorProto, helper
    shapes = {"x": [1, 1, 2, 2, 2], "w": [1, 1, 1, 1, 1], "offset": [1, 3, 2, 2, 2]}
    graph = helper.make_graph([helper.make_node("DeformConv", list(shapes), ["y"])], "volume",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in shapes.items()],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]).SerializeToString()
    client = daemon.client("acme")
    with pytest.raises(RtdError) as e:
        client.load("volume", daemon.package("acme", model, "volume"))
    assert e.value.code == Code.E_OP_UNSUPPORTED and "ai.onnx DeformConv (opset 19): " in str(e.value)
    assert "volume" not in [m.name for m in client.index()]


def test_a_type_the_op_cannot_take_is_refused_at_load_naming_op_and_dtype(daemon):
    """A LabelEncoder keyed by strings fed a declared float input: onnxruntime refuses the
    session; rtd refuses the load (the worker's warm-up runs the declared types), never the
    first request, and nothing stays loaded."""
    from onnx import TensorProto, helper
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", keys_strings=["a", "b"],
                            values_int64s=[1, 2], default_int64=-1)
    graph = helper.make_graph([node], "enc", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, [None])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 2)])
    client = daemon.client("acme")
    with pytest.raises(RtdError) as e:
        client.load("enc", daemon.package("acme", model.SerializeToString(), "enc"))
    assert e.value.code == Code.E_OP_UNSUPPORTED, e.value
    assert "ai.onnx.ml LabelEncoder" in str(e.value) and "float32" in str(e.value)
    assert "enc" not in [m.name for m in client.index()]


def test_rtctl_run_writes_outputs_under_safe_names_only(daemon, tmp_path):
    """Output names are the package's choice: a paddle2onnx name with a slash, a '../' that would
    leave the output directory, a hidden-file name and two names that clash once made safe."""
    from onnx import TensorProto, helper
    names = ["save_infer_model/scale_0.tmp_1", "../escape", ".hidden", "a/b", "a_b"]
    graph = helper.make_graph([helper.make_node("Neg" if i % 2 else "Relu", ["X"], [n]) for i, n in enumerate(names)], "named",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in names])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    pack.write_package(daemon.package("beta", model, "named"), str(tmp_path / "named.tar"), "named")
    token = tmp_path / "token"
    token.write_text(daemon.tokens["beta"])
    conn = ["--socket", daemon.socket, "--token-file", str(token)]
    assert subprocess.run([RTCTL, "load", str(tmp_path / "named.tar"), *conn], capture_output=True, timeout=120).returncode == 0
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "deep" / "out"
    done = subprocess.run([RTCTL, "run", "named", "--input", f"X={tmp_path / 'x.npy'}", "--output-dir", str(out), "--json",
                           *conn], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    files = {n: v["file"] for n, v in json.loads(done.stdout)["outputs"].items()}
    assert sorted(os.listdir(out)) == sorted(os.path.basename(f) for f in files.values()) and len(set(files.values())) == 5
    assert all(os.path.dirname(f) == str(out) for f in files.values()) and not (tmp_path / "deep" / "escape.npy").exists()
    assert os.path.basename(files["save_infer_model/scale_0.tmp_1"]) == "save_infer_model_scale_0.tmp_1.npy"
    for i, name in enumerate(names):
        np.testing.assert_array_equal(np.load(files[name]), -x if i % 2 else np.maximum(x, 0))
