"""Odds and ends of the serving path against a real `rtd serve` with two tenants: scalar,
empty and BYTES tensors end to end, bounded error details, SIGHUP, metric series that go
with their model, cgroups named by the daemon's instance, and the event log."""
import hashlib
import os
import re
import signal
import time

import numpy as np
import onnx
import pytest
import tritonclient.grpc as tc
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException

from rtd.daemon.config import token_hash
from rtd.errors import MAX_DETAIL, Code, RtdError
from tests.daemon.conftest import mlp
from tests.daemon.test_serving import reference


def scalar_and_strings() -> bytes:
    """C = A + B on scalars; T = S for a BYTES tensor of any length."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["A", "B"], ["C"]), helper.make_node("Identity", ["S"], ["T"])], "odds",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, []), helper.make_tensor_value_info("B", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("S", TensorProto.STRING, ["N"])],
        [helper.make_tensor_value_info("C", TensorProto.FLOAT, []), helper.make_tensor_value_info("T", TensorProto.STRING, ["N"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def test_scalar_empty_and_bytes_tensors_cross_end_to_end(daemon):
    daemon.client("acme").load("odds", daemon.package("acme", scalar_and_strings(), "odds"))
    words = np.array([b"alpha", "\u00e9t\u00e9".encode(), b"", b"\x00\xff" * 40000], dtype=object)   # one of 80 KB
    got = daemon.client("acme").infer("odds", {"A": np.float32(1.5), "B": np.float32(2.0), "S": words})
    assert got["C"].shape == () and got["C"] == np.float32(3.5)
    assert list(got["T"]) == list(words)
    empty = daemon.client("acme").infer("odds", {"A": np.float32(0), "B": np.float32(0), "S": np.array([], dtype=object)})
    assert empty["T"].shape == (0,)
    client, headers = tc.InferenceServerClient(daemon.url()), {"authorization": f"Bearer {daemon.tokens['acme']}"}
    a, b, s = tc.InferInput("A", [], "FP32"), tc.InferInput("B", [], "FP32"), tc.InferInput("S", [2], "BYTES")
    a.set_data_from_numpy(np.array(2, np.float32))
    b.set_data_from_numpy(np.array(5, np.float32))
    s.set_data_from_numpy(np.array([b"x", b"yz"], dtype=object))
    result = client.infer("odds", [a, b, s], headers=headers)
    assert result.as_numpy("C") == 7.0 and list(result.as_numpy("T")) == [b"x", b"yz"]
    meta = client.get_model_metadata("odds", headers=headers)
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.inputs] == [("A", "FP32", []), ("B", "FP32", []),
                                                                         ("S", "BYTES", [-1])]


def test_error_details_are_bounded_and_keep_their_code(daemon):
    with pytest.raises(RtdError) as e:
        daemon.client("acme").infer("x" * 44000, {"X": np.ones((1, 4), np.float32)})
    assert e.value.code == Code.E_MODEL_NOT_FOUND and len(e.value.detail) <= MAX_DETAIL
    client = tc.InferenceServerClient(daemon.url())
    with pytest.raises(InferenceServerException) as e:
        client.get_model_metadata("y" * 44000, headers={"authorization": f"Bearer {daemon.tokens['acme']}"})
    assert e.value.status() == "StatusCode.NOT_FOUND" and len(e.value.message()) < 400


def test_metric_series_go_with_their_model(daemon):
    x = np.ones((1, 4), np.float32)
    for i in range(20):
        daemon.client("beta").load(f"cycle{i}", daemon.package("beta", mlp(i), f"cycle{i}"))
        daemon.client("beta").infer(f"cycle{i}", {"X": x})
        daemon.client("beta").unload(f"cycle{i}")
    text = daemon.scrape()
    assert 'model="cycle' not in text


def test_workers_cgroups_carry_the_daemon_instance(daemon):
    daemon.client("beta").load("where", daemon.package("beta", mlp(1), "where"))
    [instance] = daemon.instances("beta", "where")
    expected = "i" + hashlib.sha256(os.path.realpath(daemon.state).encode()).hexdigest()[:12]
    with open(f"/proc/{instance['pid']}/cgroup") as f:
        paths = [line.rstrip().split(":", 2)[2] for line in f]
    assert any(f"/rtd/{expected}/beta/" in p for p in paths), paths


def test_the_log_says_what_happened_and_never_a_token(daemon):
    daemon.client("acme").load("logged", daemon.package("acme", mlp(1), "logged"))
    with pytest.raises(RtdError):
        daemon.client("acme").load("logged2", {"1/model.onnx": b"junk"})
    log = daemon.read_log()
    assert re.search(r"event=load tenant=acme model=logged version=1 ", log)
    assert re.search(r"event=load_refused tenant=acme .*model=logged2 code=E_FILE_MISSING", log)
    assert "event=start" in log
    for secret in (*daemon.tokens.values(), daemon.admin_token):
        assert secret not in log


def test_sighup_reloads_tokens_and_a_bad_config_keeps_the_old_one(fresh_daemon):
    d = fresh_daemon()
    d.client("acme").load("m", d.package("acme", mlp(1), "m"))
    old, new = d.tokens["acme"], "rotated-" + "z" * 40
    good = open(d.config).read()
    with open(d.config, "w") as f:
        f.write(good.replace(token_hash(old), token_hash(new)))
    d.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while "event=reload " not in d.read_log() and time.monotonic() < deadline:
        time.sleep(0.05)
    d.tokens["acme"] = new
    np.testing.assert_allclose(d.client("acme").infer("m", {"X": np.ones((1, 4), np.float32)})["Y"],
                               reference(mlp(1), {"X": np.ones((1, 4), np.float32)})["Y"], rtol=1e-5, atol=1e-6)
    d.tokens["acme"] = old
    with pytest.raises(RtdError) as e:
        d.client("acme").index()
    assert e.value.code == Code.E_UNAUTHENTICATED
    with open(d.config, "w") as f:
        f.write(good.replace("[limits]", "[limits]\nno_such_key = 1"))
    d.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while "event=reload_refused" not in d.read_log() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "no_such_key" in d.read_log()
    d.tokens["acme"] = new
    assert [m.name for m in d.client("acme").index()] == ["m"]   # still up, still the reloaded tokens
    assert d.proc.poll() is None


def test_the_daemon_raises_its_fd_limit_and_keeps_connections_below_it(daemon):
    with open(f"/proc/{daemon.proc.pid}/limits") as f:
        soft, hard = re.search(r"^Max open files\s+(\d+)\s+(\d+)", f.read(), re.M).groups()
    assert soft == hard, "the soft fd limit is raised to the hard one at start"
    started = re.search(r"event=start .*max_connections=(\d+)", daemon.read_log())
    assert started and int(started.group(1)) < int(soft)
