"""`rtctl profile`: one request timed step by step inside the tenant's own confined worker,
its Chrome trace written to a file. The trace comes back as one more output of the request
(`rtd.trace`, asked for with the `rtd_profile` parameter), so it is charged and bounded like
any output, works over gRPC and REST alike, and only for the caller's own models."""
import json

import numpy as np
import onnxruntime
import pytest
from rtd.proto import TRACE_OUTPUT
from rtd.errors import Code, RtdError
from tests.daemon.conftest import mlp
from tests.daemon.test_rest import curl
from tests.daemon.test_rtctl import cli, refused


def _steps(trace: dict) -> list:
    return [e for e in trace["traceEvents"] if e.get("cat") == "op"]


def test_rtctl_profile_writes_the_workers_trace(daemon, tmp_path):
    d, work = daemon, tmp_path
    model = mlp(11, inner=5)
    d.client("acme").load("prof", d.package("acme", model, "prof"))
    (work / "acme.token").write_text(d.tokens["acme"])
    (work / "beta.token").write_text(d.tokens["beta"])
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    np.save(work / "x.npy", x)
    done = cli("profile", "prof", "--input", "X=x.npy", "--out", "t.json", "--json", "--socket", d.socket,
               "--token-file", work / "acme.token", cwd=work)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    trace = json.loads((work / "t.json").read_text())
    steps = _steps(trace)
    assert steps and summary["steps"] == len(steps) and summary["trace"] == "t.json"
    assert all(s["dur"] >= 0 and s["ph"] == "X" for s in steps)
    run = [e for e in trace["traceEvents"] if e.get("cat") == "run"]
    assert len(run) == 1 and all(run[0]["ts"] <= s["ts"] and s["ts"] + s["dur"] <= run[0]["ts"] + run[0]["dur"] + 1
                                 for s in steps)   # every step inside the one run
    assert abs(summary["total_us"] - sum(s["dur"] for s in steps)) < 1
    table = cli("profile", "prof", "--input", "X=x.npy", "--out", "t2.json", "--socket", d.socket,
                "--token-file", work / "acme.token", cwd=work).stdout
    assert "trace in t2.json" in table
    refused(cli("profile", "prof", "--input", "X=x.npy", "--socket", d.socket, "--token-file", work / "beta.token",
                cwd=work), "E_MODEL_NOT_FOUND")

    # the same request without profiling: same outputs, and no trace
    plain = d.client("acme").infer("prof", {"X": x})
    profiled = d.client("acme").infer("prof", {"X": x}, profile=True)
    assert set(plain) == {"Y"} and set(profiled) == {"Y", TRACE_OUTPUT}
    want = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    np.testing.assert_allclose(profiled["Y"], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(plain["Y"], profiled["Y"])


def test_rest_profile_parameter_returns_the_trace(daemon):
    d = daemon
    d.client("beta").load("prof", d.package("beta", mlp(12), "prof"))
    request = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}],
               "parameters": {"rtd_profile": True}}
    status, body = curl(d, "/v2/models/prof/infer", "-d", json.dumps(request), token=d.tokens["beta"])
    assert status == 200, body
    outputs = {o["name"]: o for o in json.loads(body)["outputs"]}
    assert set(outputs) == {"Y", TRACE_OUTPUT} and outputs[TRACE_OUTPUT]["datatype"] == "BYTES"
    assert _steps(json.loads(outputs[TRACE_OUTPUT]["data"][0]))
    request["parameters"] = {}
    assert {o["name"] for o in json.loads(curl(d, "/v2/models/prof/infer", "-d", json.dumps(request),
                                               token=d.tokens["beta"])[1])["outputs"]} == {"Y"}


def test_a_profile_of_a_model_with_an_output_named_like_the_trace_is_refused(daemon):
    from onnx import TensorProto, helper
    graph = helper.make_graph([helper.make_node("Relu", ["x"], [TRACE_OUTPUT])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info(TRACE_OUTPUT, TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    d = daemon
    d.client("acme").load("clash", d.package("acme", model, "clash"))
    assert d.client("acme").infer("clash", {"x": np.ones(2, np.float32)})[TRACE_OUTPUT].tolist() == [1, 1]
    with pytest.raises(RtdError) as e:
        d.client("acme").infer("clash", {"x": np.ones(2, np.float32)}, profile=True)
    assert e.value.code == Code.E_REQUEST_INVALID and TRACE_OUTPUT in str(e.value)
