"""Triton ensembles against a real `rtd serve` with two tenants: a chain of three of a tenant's
models served as one model through tritonclient (gRPC and REST) and rtctl, its outputs equal to
onnxruntime running the steps in sequence; statistics per step and for the whole; a crash or a
deadline in a step is one coded error naming the step, and the other tenant notices nothing;
hostile ensembles are refused at load and nothing of them is served."""
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
from onnx import TensorProto, helper, numpy_helper

from rtd.errors import Code, RtdError
from rtd.loader import pack
from rtd.proto import grpc_service_pb2 as pb
from tests.daemon.conftest import Daemon, _bytes, free_port, mlp, slow_model

RTCTL = os.path.join(os.path.dirname(sys.executable), "rtctl")


def dense(n_in: int, n_out: int, seed: int, extra: int = 0) -> bytes:
    """X[N,n_in] (and Z[N,extra]) → Y = tanh(X·W (+ Z·V)) [N,n_out]."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((n_in, n_out)).astype(np.float32), "W")]
    nodes = [helper.make_node("MatMul", ["X", "W"], ["H"])]
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", n_in])]
    if extra:
        inits.append(numpy_helper.from_array(rng.standard_normal((extra, n_out)).astype(np.float32), "V"))
        inputs.append(helper.make_tensor_value_info("Z", TensorProto.FLOAT, ["N", extra]))
        nodes += [helper.make_node("MatMul", ["Z", "V"], ["G"]), helper.make_node("Add", ["H", "G"], ["S"])]
    nodes.append(helper.make_node("Tanh", ["S" if extra else "H"], ["Y"]))
    graph = helper.make_graph(nodes, "dense", inputs, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", n_out])], inits)
    return _bytes(graph)


STEPS = {"embed": dense(4, 3, 1), "mix": dense(3, 3, 2), "head": dense(3, 2, 3, extra=4)}

CHAIN = b'''
name: "chain"
platform: "ensemble"
input [ { name: "pixels" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]
output [ { name: "scores" data_type: TYPE_FP32 dims: [ -1, 2 ] }, { name: "features" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]
ensemble_scheduling { step [
  { model_name: "embed" model_version: -1 input_map { key: "X" value: "pixels" } output_map { key: "Y" value: "h" } },
  { model_name: "mix" model_version: -1 input_map { key: "X" value: "h" } output_map { key: "Y" value: "features" } },
  { model_name: "head" model_version: -1 input_map [ { key: "X" value: "features" }, { key: "Z" value: "pixels" } ]
    output_map { key: "Y" value: "scores" } } ] }
'''


def run(model: bytes, feeds: dict) -> dict:
    session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


def in_sequence(x: np.ndarray) -> dict:
    """onnxruntime running the chain's steps one after the other."""
    h = run(STEPS["embed"], {"X": x})["Y"]
    features = run(STEPS["mix"], {"X": h})["Y"]
    return {"features": features, "scores": run(STEPS["head"], {"X": features, "Z": x})["Y"]}


def ensemble(daemon, tenant: str, config: bytes, name: str = "chain", counter: int = 1) -> dict:
    return pack.ensemble_files(config, name=name, version=f"1.0.{counter}", counter=counter, private_key=daemon.keys[tenant])


def load_steps(daemon, tenant: str, steps: dict = STEPS, counter: int = 1) -> None:
    for name, model in steps.items():
        daemon.client(tenant).load(name, daemon.package(tenant, model, name, counter=counter))


def headers(daemon, tenant: str) -> dict:
    return {"authorization": f"Bearer {daemon.tokens[tenant]}"}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    """The two tenants' daemon, its REST front also on a loopback port (tritonclient.http speaks TCP)."""
    port = free_port()
    d = Daemon(tmp_path_factory.mktemp("rtd"), listen=f'[listen]\nunsafe_plaintext_rest_tcp = "127.0.0.1:{port}"\n').start()
    d.rest_port = port
    yield d
    assert d.stop() == 0, d.read_log()


def test_the_chain_serves_as_one_model_through_grpc_rest_and_its_outputs_are_the_steps_in_sequence(daemon):
    load_steps(daemon, "acme")
    daemon.client("acme").load("chain", ensemble(daemon, "acme", CHAIN))
    x = np.random.default_rng(7).standard_normal((5, 4)).astype(np.float32)
    want = in_sequence(x)
    grpc_client, auth = tc.InferenceServerClient(daemon.url()), headers(daemon, "acme")
    given = tc.InferInput("pixels", list(x.shape), "FP32")
    given.set_data_from_numpy(x)
    result = grpc_client.infer("chain", [given], headers=auth)
    assert result.get_response().model_name == "chain" and result.get_response().model_version == "1"
    for name in want:
        np.testing.assert_allclose(result.as_numpy(name), want[name], rtol=1e-5, atol=1e-6)
    only = grpc_client.infer("chain", [given], outputs=[tc.InferRequestedOutput("scores")], headers=auth)
    assert [o.name for o in only.get_response().outputs] == ["scores"]

    rest = th.InferenceServerClient(f"127.0.0.1:{daemon.rest_port}", network_timeout=60)
    try:
        given_http = th.InferInput("pixels", list(x.shape), "FP32")
        given_http.set_data_from_numpy(x, binary_data=True)
        answer = rest.infer("chain", [given_http], headers=dict(auth))   # it adds its own headers to the dict
        for name in want:
            np.testing.assert_allclose(answer.as_numpy(name), want[name], rtol=1e-5, atol=1e-6)
        as_json = rest.infer("chain", [given_http], outputs=[th.InferRequestedOutput("scores", binary_data=False)],
                             headers=dict(auth))
        np.testing.assert_allclose(as_json.as_numpy("scores"), want["scores"], rtol=1e-5, atol=1e-6)
        assert rest.get_model_metadata("chain", headers=dict(auth))["platform"] == "ensemble"
    finally:
        rest.close()

    meta = grpc_client.get_model_metadata("chain", headers=auth)
    assert meta.platform == "ensemble" and [i.name for i in meta.inputs] == ["pixels"]
    assert [o.name for o in meta.outputs] == ["scores", "features"]
    config = grpc_client.get_model_config("chain", headers=auth).config
    assert [s.model_name for s in config.ensemble_scheduling.step] == ["embed", "mix", "head"]
    whole = grpc_client.get_inference_statistics("chain", headers=auth).model_stats[0].inference_stats
    assert whole.success.count == 4   # two gRPC requests, two REST
    for step in STEPS:   # each step counted in its own model's statistics, as Triton counts composing models
        assert grpc_client.get_inference_statistics(step, headers=auth).model_stats[0].inference_stats.success.count == 4
    view = daemon.tenant("acme")["models"]["chain"]["serving"]["ensemble"]
    assert [s["model"] for s in view] == ["embed", "mix", "head"] and {s["state"] for s in view} == {"READY"}
    # the other tenant has none of it
    with pytest.raises(RtdError) as e:
        daemon.client("beta").infer("chain", {"pixels": x})
    assert e.value.code == Code.E_MODEL_NOT_FOUND
    # a request that does not fit the ensemble's own inputs is refused before any step runs
    with pytest.raises(RtdError) as e:
        daemon.client("acme").infer("chain", {"pixels": np.ones((2, 5), np.float32)})
    assert e.value.code == Code.E_INPUT_INVALID
    daemon.client("acme").unload("chain")
    for step in STEPS:
        daemon.client("acme").unload(step)


def test_hostile_ensembles_are_refused_at_load_and_nothing_is_served(daemon):
    load_steps(daemon, "beta")
    daemon.client("acme").load("other", daemon.package("acme", dense(3, 3, 9), "other"))

    def step(model, inputs, outputs):
        maps = "".join(f' input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
        maps += "".join(f' output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
        return f'{{ model_name: "{model}" model_version: -1{maps} }}'

    def config(*steps, outputs='{ name: "out" data_type: TYPE_FP32 dims: [ -1, 3 ] }'):
        return (f'name: "bad" platform: "ensemble" input [ {{ name: "x" data_type: TYPE_FP32 dims: [ -1, 4 ] }} ] '
                f'output [ {outputs} ] ensemble_scheduling {{ step [ {", ".join(steps)} ] }}').encode()

    cases = {
        "a cycle in the maps": config(step("embed", {"X": "x"}, {"Y": "a"}), step("mix", {"X": "c"}, {"Y": "b"}),
                                      step("other", {"X": "b"}, {"Y": "c"}), step("head", {"X": "a", "Z": "x"}, {"Y": "out"})),
        "a step named twice": config(step("embed", {"X": "x"}, {"Y": "a"}), step("mix", {"X": "a"}, {"Y": "b"}),
                                     step("mix", {"X": "b"}, {"Y": "out"})),
        "a map to a missing tensor": config(step("embed", {"X": "x"}, {"Y": "a"}), step("mix", {"X": "nowhere"}, {"Y": "out"})),
        "a step of another tenant": config(step("embed", {"X": "x"}, {"Y": "a"}), step("other", {"X": "a"}, {"Y": "out"})),
        "a missing step model": config(step("embed", {"X": "x"}, {"Y": "a"}), step("absent", {"X": "a"}, {"Y": "out"})),
        "an input the step does not have": config(step("embed", {"X": "x", "Q": "x"}, {"Y": "out"})),
        "an output the step does not have": config(step("embed", {"X": "x"}, {"Nope": "out"})),
        "a tensor written twice": config(step("embed", {"X": "x"}, {"Y": "out"}), step("mix", {"X": "out"}, {"Y": "out"})),
        "a type that does not meet": config(step("embed", {"X": "x"}, {"Y": "out"}),
                                            outputs='{ name: "out" data_type: TYPE_INT64 dims: [ -1, 3 ] }'),
        "a shape that does not meet": config(step("mix", {"X": "x"}, {"Y": "out"})),
        "an output no step writes": config(step("embed", {"X": "x"}, {"Y": "a"})),
        "the ensemble as its own step": config(step("bad", {"X": "x"}, {"Y": "out"})),
    }
    for counter, (case, text) in enumerate(cases.items(), 1):
        with pytest.raises(RtdError) as e:
            daemon.client("beta").load("bad", ensemble(daemon, "beta", text, name="bad", counter=counter))
        assert e.value.code == Code.E_ENSEMBLE_INVALID, (case, e.value)
        assert "bad" not in {m.name for m in daemon.client("beta").index()}, case
    assert "code=E_ENSEMBLE_INVALID" in daemon.read_log()
    for name in STEPS:
        daemon.client("beta").unload(name)
    daemon.client("acme").unload("other")


def test_a_crash_in_a_step_is_one_coded_error_naming_it_and_the_other_tenant_notices_nothing(fresh_daemon):
    d = fresh_daemon()
    layers = 240   # seconds of work for the request below, so the kill lands mid-step
    steps = {"embed": dense(384, 384, 1), "slow": slow_model(layers), "mix": dense(384, 3, 2)}
    load_steps(d, "acme", steps)
    config = b'''name: "chain" platform: "ensemble"
      input [ { name: "x" data_type: TYPE_FP32 dims: [ -1, 384 ] } ] output [ { name: "y" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]
      ensemble_scheduling { step [
        { model_name: "embed" model_version: -1 input_map { key: "X" value: "x" } output_map { key: "Y" value: "a" } },
        { model_name: "slow" model_version: -1 input_map { key: "X" value: "a" } output_map { key: "Y" value: "b" } },
        { model_name: "mix" model_version: -1 input_map { key: "X" value: "b" } output_map { key: "Y" value: "y" } } ] }'''
    d.client("acme").load("chain", ensemble(d, "acme", config))
    d.client("beta").load("mlp", d.package("beta", mlp(1), "mlp"))
    big = np.ones((6000, 384), np.float32) * 0.01
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        doomed = pool.submit(d.client("acme").infer, "chain", {"x": big})
        [instance] = d.instances("acme", "slow")
        while not any(i["in_flight"] for i in d.instances("acme", "slow")):
            assert not doomed.done(), doomed.exception()
            time.sleep(0.05)
        os.kill(instance["pid"], signal.SIGKILL)
        with pytest.raises(RtdError) as e:
            doomed.result(timeout=60)
    assert e.value.code == Code.E_WORKER_CRASHED and e.value.detail.startswith("chain step 'slow': "), e.value
    x = np.ones((1, 4), np.float32)
    np.testing.assert_allclose(d.client("beta").infer("mlp", {"X": x})["Y"], run(mlp(1), {"X": x})["Y"], rtol=1e-5)
    d.wait_ready("acme", "slow")
    small = np.random.default_rng(1).standard_normal((2, 384)).astype(np.float32) * 0.05
    got = d.client("acme").infer("chain", {"x": small})["y"]
    a = run(steps["embed"], {"X": small})["Y"]
    want = run(steps["mix"], {"X": run(steps["slow"], {"X": a})["Y"]})["Y"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)

    # a deadline that passes in a step: one E_DEADLINE naming it, the worker left to finish
    request = pb.ModelInferRequest(model_name="chain", inputs=[pb.ModelInferRequest.InferInputTensor(
        name="x", datatype="FP32", shape=[3000, 384])], raw_input_contents=[big[:3000].tobytes()])
    request.parameters["timeout"].int64_param = 300_000   # 0.3 s, in tritonclient's microseconds
    with pytest.raises(RtdError) as e:
        d.client("acme").call("ModelInfer", request)
    assert e.value.code == Code.E_DEADLINE and e.value.detail.startswith("chain step "), e.value
    np.testing.assert_allclose(d.client("beta").infer("mlp", {"X": x})["Y"], run(mlp(1), {"X": x})["Y"], rtol=1e-5)
    assert d.metric('rtd_instance_ends_total{') == 1   # only the killed step's instance ever ended
    assert d.instances("beta", "mlp")


def test_steps_of_different_requests_overlap_and_each_step_batches(fresh_daemon):
    # Overlap is seen, not timed: while the second step runs a batch, the first runs a later request. A
    # short batch delay sends the second step each batch while the first is still busy, however fast the
    # executor runs these models (a 100 ms delay outlasted all of the first step's work once it ran in C).
    d = fresh_daemon(max_concurrency=8)
    batched = b'max_batch_size: 32 dynamic_batching { max_queue_delay_microseconds: 20000 }'
    first, second = slow_model(60, 768), slow_model(60, 768)   # 4 rows a request: each step's run lasts milliseconds
    d.client("acme").load("first", d.package("acme", first, "first"))
    d.client("acme").load("second", d.package("acme", second, "second", config=batched))
    config = b'''name: "pair" platform: "ensemble"
      input [ { name: "x" data_type: TYPE_FP32 dims: [ -1, 768 ] } ] output [ { name: "y" data_type: TYPE_FP32 dims: [ -1, 768 ] } ]
      ensemble_scheduling { step [
        { model_name: "first" model_version: -1 input_map { key: "X" value: "x" } output_map { key: "Y" value: "a" } },
        { model_name: "second" model_version: -1 input_map { key: "X" value: "a" } output_map { key: "Y" value: "y" } } ] }'''
    d.client("acme").load("pair", ensemble(d, "acme", config, name="pair"))
    requests = 16   # within the tenant's queue (max_queue)
    xs = [np.random.default_rng(i).standard_normal((4, 768)).astype(np.float32) * 0.1 for i in range(requests)]
    busy_together = False
    with concurrent.futures.ThreadPoolExecutor(requests) as pool:
        futures = [pool.submit(d.client("acme").infer, "pair", {"x": x}) for x in xs]
        while not all(f.done() for f in futures) and not busy_together:
            models = d.tenant("acme")["models"]
            flights = {n: sum(i["in_flight"] for i in models[n]["serving"]["instances"]) for n in ("first", "second")}
            busy_together = all(flights.values())
        results = [f.result() for f in futures]
    for x, got in zip(xs, results):
        np.testing.assert_allclose(got["y"], run(second, {"X": run(first, {"X": x})["Y"]})["Y"], rtol=1e-4, atol=1e-5)
    assert busy_together, "the second step never ran while the first ran another request"
    executions = d.metric('nv_inference_exec_count{model="second",tenant="acme"')
    assert d.metric('nv_inference_request_success{model="second",tenant="acme"') == requests and executions < requests
    assert d.metric('nv_inference_request_success{model="pair",tenant="acme"') == requests


def test_an_unloaded_step_refuses_the_ensembles_requests_naming_it(daemon):
    load_steps(daemon, "beta", counter=2)
    daemon.client("beta").load("chain", ensemble(daemon, "beta", CHAIN, counter=5))
    daemon.client("beta").unload("mix")
    with pytest.raises(RtdError) as e:
        daemon.client("beta").infer("chain", {"pixels": np.ones((1, 4), np.float32)})
    assert e.value.code == Code.E_MODEL_UNAVAILABLE and "step 'mix'" in e.value.detail
    daemon.client("beta").load("mix", daemon.package("beta", STEPS["mix"], "mix", counter=3))
    x = np.ones((1, 4), np.float32)
    np.testing.assert_allclose(daemon.client("beta").infer("chain", {"pixels": x})["scores"], in_sequence(x)["scores"],
                               rtol=1e-5, atol=1e-6)
    for name in ("chain", *STEPS):
        daemon.client("beta").unload(name)


def test_rtctl_packs_loads_runs_and_unloads_an_ensemble(daemon, tmp_path):
    load_steps(daemon, "acme", counter=2)
    (tmp_path / "chain.pbtxt").write_bytes(CHAIN)
    key = tmp_path / "signing.pem"
    from cryptography.hazmat.primitives import serialization
    key.write_bytes(daemon.keys["acme"].private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
    token = tmp_path / "token"
    token.write_text(daemon.tokens["acme"])
    conn = ["--socket", daemon.socket, "--token-file", str(token)]

    def rtctl(*args):
        done = subprocess.run([RTCTL, *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout
    rtctl("pack", str(tmp_path / "chain.pbtxt"), "--name", "chain", "--version", "2.0.0", "--counter", "9",
          "--key", str(key), "--out", str(tmp_path / "chain.tar"))
    rtctl("load", str(tmp_path / "chain.tar"), *conn)
    x = np.random.default_rng(3).standard_normal((2, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = json.loads(rtctl("run", "chain", "--input", f"pixels={tmp_path / 'x.npy'}", "--json", *conn))
    np.testing.assert_allclose(np.array(out["outputs"]["scores"]["data"]), in_sequence(x)["scores"], rtol=1e-5, atol=1e-6)
    assert {"name": "chain", "version": "9", "state": "READY", "reason": ""} in json.loads(rtctl("list", "--json", *conn))
    rtctl("unload", "chain", *conn)
    for name in STEPS:
        rtctl("unload", name, *conn)


def test_an_ensemble_signed_in_the_tenants_repository_loads_by_name(fresh_daemon, tmp_path):
    repo = tmp_path / "repo"
    d = fresh_daemon(repository=str(repo))
    load_steps(d, "acme")
    version_dir = repo / "acme" / "chain" / "1"
    version_dir.mkdir(parents=True)
    (version_dir.parent / "config.pbtxt").write_bytes(CHAIN)
    meta = pack.sign_version_dir(str(version_dir), d.keys["acme"])   # as `rtctl sign` does it in place
    assert meta["name"] == "chain" and [i["name"] for i in meta["inputs"]] == ["pixels"]
    client, auth = tc.InferenceServerClient(d.url()), headers(d, "acme")
    client.load_model("chain", headers=auth)
    x = np.random.default_rng(11).standard_normal((3, 4)).astype(np.float32)
    given = tc.InferInput("pixels", list(x.shape), "FP32")
    given.set_data_from_numpy(x)
    np.testing.assert_allclose(client.infer("chain", [given], headers=auth).as_numpy("scores"), in_sequence(x)["scores"],
                               rtol=1e-5, atol=1e-6)
    with pytest.raises(Exception) as e:   # beta's repository has no such ensemble, and acme's steps are not beta's
        client.load_model("chain", headers=headers(d, "beta"))
    assert "E_MODEL_NOT_FOUND" in str(e.value)
    client.unload_model("chain", headers=auth)
