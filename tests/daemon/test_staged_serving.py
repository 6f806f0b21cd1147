"""A model cut into pipeline stages against a real `rtd serve` with two tenants: loaded, served
and unloaded through tritonclient (gRPC and REST) and rtctl, its answers equal to onnxruntime
running the whole model; the cut shown by `rtctl status`; each stage its own confined worker
with its share of the tenant's threads; a stage's crash is one coded error naming the stage,
the other tenant notices nothing, and the restarted stage takes the same cut."""
import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import onnxruntime
import pytest
import tritonclient.grpc as tc
import tritonclient.http as th
from cryptography.hazmat.primitives import serialization
from onnx import TensorProto, helper, numpy_helper

from rtd.errors import Code, RtdError
from rtd.loader import pack
from tests.daemon.conftest import Daemon, _bytes, free_port, mlp, slow_model

RTCTL = os.path.join(os.path.dirname(sys.executable), "rtctl")


def conv_net() -> bytes:
    """Five convolutions with Relus, then a mean over the image: [N,3,24,24] → [N,8]."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "image"
    channels = (3, 16, 32, 32, 16, 8)
    for i, (cin, cout) in enumerate(zip(channels, channels[1:])):
        inits.append(numpy_helper.from_array(rng.standard_normal((cout, cin, 3, 3)).astype(np.float32) * 0.2, f"w{i}"))
        nodes += [helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        prev = f"r{i}"
    nodes.append(helper.make_node("ReduceMean", [prev], ["features"], axes=[2, 3], keepdims=0))
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, 24, 24])],
                              [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["N", 8])], inits)
    return _bytes(graph)


def run(model: bytes, feeds: dict) -> dict:
    session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    port = free_port()
    d = Daemon(tmp_path_factory.mktemp("rtd"), listen=f'[listen]\nunsafe_plaintext_rest_tcp = "127.0.0.1:{port}"\n',
               policies={"acme": {"cpu_cores": 2}}).start()
    d.rest_port = port
    yield d
    assert d.stop() == 0, d.read_log()


def staged_view(daemon, tenant: str, name: str) -> dict:
    return daemon.tenant(tenant)["models"][name]["serving"]["stages"]


def test_a_staged_model_serves_through_tritonclient_as_the_whole_model_does(daemon):
    model = conv_net()
    files = daemon.package("acme", model, "conv", config=pack.with_stages(None, 2))
    grpc_client, auth = tc.InferenceServerClient(daemon.url()), {"authorization": f"Bearer {daemon.tokens['acme']}"}
    grpc_client.load_model("conv", files={f"file:{path}": data for path, data in files.items()}, headers=auth)
    x = np.random.default_rng(1).standard_normal((2, 3, 24, 24)).astype(np.float32)
    want = run(model, {"image": x})["features"]
    given = tc.InferInput("image", list(x.shape), "FP32")
    given.set_data_from_numpy(x)
    np.testing.assert_allclose(grpc_client.infer("conv", [given], headers=auth).as_numpy("features"), want, rtol=1e-4, atol=1e-5)
    rest = th.InferenceServerClient(f"127.0.0.1:{daemon.rest_port}", network_timeout=60)
    try:
        given_http = th.InferInput("image", list(x.shape), "FP32")
        given_http.set_data_from_numpy(x, binary_data=True)
        np.testing.assert_allclose(rest.infer("conv", [given_http], headers=dict(auth)).as_numpy("features"), want,
                                   rtol=1e-4, atol=1e-5)
    finally:
        rest.close()
    meta = grpc_client.get_model_metadata("conv", headers=auth)
    assert [i.name for i in meta.inputs] == ["image"] and [o.name for o in meta.outputs] == ["features"]
    assert grpc_client.get_inference_statistics("conv", headers=auth).model_stats[0].inference_stats.success.count == 2
    view = staged_view(daemon, "acme", "conv")
    assert view["count"] == 2 and view["method"] == "measured"
    ranges = [s["nodes"] for s in view["stages"]]
    assert ranges[0][0] == 0 and ranges[0][1] == ranges[1][0] and ranges[1][1] == 11
    assert all(s["requests"] == 2 and s["ops"] and s["estimated_ms"] is not None for s in view["stages"])
    pids = [i["pid"] for s in view["stages"] for i in s["instances"]]
    assert len(set(pids)) == 2   # each stage its own worker
    grpc_client.unload_model("conv", headers=auth)
    assert "conv" not in daemon.tenant("acme")["models"]
    # the other tenant never saw it
    with pytest.raises(RtdError) as e:
        daemon.client("beta").infer("conv", {"image": x})
    assert e.value.code == Code.E_MODEL_NOT_FOUND


def test_rtctl_packs_a_staged_model_and_status_shows_the_cut(daemon, tmp_path):
    model = conv_net()
    (tmp_path / "conv.onnx").write_bytes(model)
    key = tmp_path / "signing.pem"
    key.write_bytes(daemon.keys["beta"].private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                      serialization.NoEncryption()))
    token = tmp_path / "token"
    token.write_text(daemon.tokens["beta"])
    admin = tmp_path / "admin"
    admin.write_text(daemon.admin_token)
    conn = ["--socket", daemon.socket, "--token-file", str(token)]

    def rtctl(*args):
        done = subprocess.run([RTCTL, *args], capture_output=True, text=True, timeout=180, env={**os.environ, "COLUMNS": "200"})
        assert done.returncode == 0, done.stderr
        return done.stdout
    rtctl("pack", str(tmp_path / "conv.onnx"), "--name", "conv", "--version", "1.0.0", "--stages", "3", "--key", str(key),
          "--out", str(tmp_path / "conv.tar"))
    rtctl("load", str(tmp_path / "conv.tar"), *conn)
    x = np.random.default_rng(2).standard_normal((1, 3, 24, 24)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = json.loads(rtctl("run", "conv", "--input", f"image={tmp_path / 'x.npy'}", "--json", *conn))
    np.testing.assert_allclose(np.array(out["outputs"]["features"]["data"]), run(model, {"image": x})["features"],
                               rtol=1e-4, atol=1e-5)
    shown = rtctl("status", "--socket", daemon.socket, "--admin-token-file", str(admin))
    assert "beta/conv: 3 stages, cut by measured cost" in shown and "Conv" in shown
    status = json.loads(rtctl("status", "--json", "--socket", daemon.socket, "--admin-token-file", str(admin)))
    cut = next(t for t in status["tenants"] if t["tenant"] == "beta")["models"]["conv"]["serving"]["stages"]
    assert [s["stage"] for s in cut["stages"]] == [1, 2, 3] and cut["node_count_bottleneck_ms"] is not None
    rtctl("unload", "conv", *conn)


def test_a_stage_crash_is_one_coded_error_naming_it_and_the_restart_takes_the_same_cut(fresh_daemon):
    d = fresh_daemon()
    layers = 240   # seconds of work for the request below, so the kill lands mid-stage
    model = slow_model(layers)
    d.client("acme").load("slow", d.package("acme", model, "slow", config=pack.with_stages(None, 2)))
    d.client("beta").load("mlp", d.package("beta", mlp(1), "mlp"))
    before = staged_view(d, "acme", "slow")
    big = np.ones((6000, 384), np.float32)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        doomed = pool.submit(d.client("acme").infer, "slow", {"X": big})
        while not any(i["in_flight"] for i in staged_view(d, "acme", "slow")["stages"][1]["instances"]):
            assert not doomed.done(), doomed.exception()
            time.sleep(0.05)
        [victim] = staged_view(d, "acme", "slow")["stages"][1]["instances"]
        os.kill(victim["pid"], signal.SIGKILL)
        with pytest.raises(RtdError) as e:
            doomed.result(timeout=120)
    assert e.value.code == Code.E_WORKER_CRASHED and e.value.detail.startswith("slow step 'stage 2/2': "), e.value
    x = np.ones((1, 4), np.float32)
    np.testing.assert_allclose(d.client("beta").infer("mlp", {"X": x})["Y"], run(mlp(1), {"X": x})["Y"], rtol=1e-5)
    deadline = time.monotonic() + 60
    while not all(s["instances"] and s["instances"][0]["live"] for s in staged_view(d, "acme", "slow")["stages"]):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    after = staged_view(d, "acme", "slow")
    assert [s["nodes"] for s in after["stages"]] == [s["nodes"] for s in before["stages"]]
    assert after["stages"][1]["instances"][0]["pid"] != victim["pid"]
    small = np.random.default_rng(3).standard_normal((2, 384)).astype(np.float32)
    np.testing.assert_allclose(d.client("acme").infer("slow", {"X": small})["Y"], run(model, {"X": small})["Y"],
                               rtol=1e-3, atol=1e-5)
    assert d.metric('rtd_instance_ends_total{') == 1   # only the killed stage's worker ever ended
