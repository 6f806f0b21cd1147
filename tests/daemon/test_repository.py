"""The server-side model repository (Triton's layout, explicit model control): tritonclient's
load_model(name) without files loads the highest numbered version of DIR/<tenant>/<name>/,
verified exactly as an upload; each tenant sees only its own directory; a bad version on disk
is refused while the served one keeps answering; the embedded default's --model-repository
and --load-model load at start, and a restart does not load the same version twice."""
import os
import signal
import subprocess
import sys
import time

import numpy as np
import onnxruntime
import pytest
import tritonclient.grpc as tc
from tritonclient.utils import InferenceServerException

from rtd.loader import keys, pack
from tests.daemon.conftest import NEEDS_ROOT, RTD, Daemon, mlp

X = np.random.default_rng(5).standard_normal((3, 4)).astype(np.float32)


def put(repo, tenant: str, files: dict) -> None:
    """Write package mlp ({model-dir-relative path: bytes}) into the repository as an operator would."""
    for path, data in files.items():
        target = os.path.join(repo, tenant, "mlp", path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as f:
            f.write(data)


def package_files(d: Daemon, tenant: str, weight_seed: int, counter: int, config: bytes | None = None) -> tuple[bytes, dict]:
    model = mlp(weight_seed)
    return model, d.package(tenant, model, "mlp", counter=counter, config=config)


def expected(model: bytes) -> np.ndarray:
    return onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"X": X})[0]


def infer(client, headers) -> tuple[np.ndarray, str]:
    given = tc.InferInput("X", list(X.shape), "FP32")
    given.set_data_from_numpy(X)
    result = client.infer("mlp", [given], headers=headers)
    return result.as_numpy("Y"), result.get_response().model_version


@pytest.fixture
def repo_daemon(tmp_path):
    repo = tmp_path / "repo"
    d = Daemon(tmp_path / "d", repository=str(repo)).start()
    yield d, str(repo)
    d.stop()


def test_load_by_name_serves_the_latest_version_and_tenants_see_only_their_own(repo_daemon):
    d, repo = repo_daemon
    client = tc.InferenceServerClient(d.url())
    acme, beta = ({"authorization": f"Bearer {d.tokens[t]}"} for t in ("acme", "beta"))
    first, files = package_files(d, "acme", 1, 1)
    put(repo, "acme", files)
    index = client.get_model_repository_index(headers=acme)
    assert [(m.name, m.version, m.state) for m in index.models] == [("mlp", "1", "UNAVAILABLE")]
    assert not client.get_model_repository_index(headers=beta).models
    client.load_model("mlp", headers=acme)
    y, version = infer(client, acme)
    np.testing.assert_allclose(y, expected(first), rtol=1e-5, atol=1e-6)
    assert version == "1"
    with pytest.raises(InferenceServerException) as e:   # beta's repository is repo/beta: acme's model is not there
        client.load_model("mlp", headers=beta)
    assert "E_MODEL_NOT_FOUND" in str(e.value)

    second, files = package_files(d, "acme", 2, 2)
    put(repo, "acme", files)
    client.load_model("mlp", headers=acme)
    y, version = infer(client, acme)
    np.testing.assert_allclose(y, expected(second), rtol=1e-5, atol=1e-6)
    assert version == "2"


def test_a_bad_version_on_disk_is_refused_and_the_served_one_keeps_answering(repo_daemon):
    d, repo = repo_daemon
    client, acme = tc.InferenceServerClient(d.url()), {"authorization": f"Bearer {d.tokens['acme']}"}
    first, files = package_files(d, "acme", 1, 1)
    put(repo, "acme", files)
    client.load_model("mlp", headers=acme)
    _, files = package_files(d, "acme", 3, 3)
    weights = bytearray(files["3/model.onnx"])
    weights[-5] ^= 0xFF
    files["3/model.onnx"] = bytes(weights)
    put(repo, "acme", files)
    with pytest.raises(InferenceServerException) as e:
        client.load_model("mlp", headers=acme)
    assert "E_DIGEST_MISMATCH" in str(e.value)
    y, version = infer(client, acme)
    assert version == "1"
    np.testing.assert_allclose(y, expected(first), rtol=1e-5, atol=1e-6)
    with pytest.raises(InferenceServerException) as e:
        client.load_model("../beta", headers=acme)
    assert "E_PATH_UNSAFE" in str(e.value)
    assert [(m.name, m.version, m.state) for m in client.get_model_repository_index(headers=acme).models] == [("mlp", "1", "READY")]


def test_the_version_policy_picks_the_version_and_one_naming_several_is_refused(repo_daemon):
    d, repo = repo_daemon
    client, acme = tc.InferenceServerClient(d.url()), {"authorization": f"Bearer {d.tokens['acme']}"}
    specific = b'name: "mlp"\nversion_policy: { specific: { versions: [1] } }\n'
    first, files = package_files(d, "acme", 1, 1, config=specific)
    put(repo, "acme", files)
    _, files = package_files(d, "acme", 2, 2, config=specific)
    put(repo, "acme", files)
    client.load_model("mlp", headers=acme)     # versions 1 and 2 on disk; the policy names 1
    y, version = infer(client, acme)
    assert version == "1"
    np.testing.assert_allclose(y, expected(first), rtol=1e-5, atol=1e-6)
    for policy in (b"all: {}", b"latest: { num_versions: 2 }", b"specific: { versions: [1, 2] }"):
        _, files = package_files(d, "acme", 3, 3, config=b'name: "mlp"\nversion_policy: { ' + policy + b" }\n")
        put(repo, "acme", files)
        with pytest.raises(InferenceServerException) as e:
            client.load_model("mlp", headers=acme)
        assert "E_CONFIG_INVALID" in str(e.value) and "more than one version" in str(e.value), policy
        assert infer(client, acme)[1] == "1"     # still serving what it served


def _serve(state: str, *args: str) -> subprocess.Popen:
    log = open(os.path.join(os.path.dirname(state), "rtd.log"), "ab")
    return subprocess.Popen([RTD, "serve", "--state-dir", state, *args], stdout=subprocess.DEVNULL, stderr=log)


def _wait_serving(proc: subprocess.Popen, log: str, seen: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, open(log).read()
        if "serving on" in open(log).read()[seen:]:
            return
        time.sleep(0.1)
    raise AssertionError(open(log).read())


def test_embedded_default_loads_listed_models_at_start_once(tmp_path):
    if os.geteuid() != 0:
        pytest.skip(NEEDS_ROOT)
    state, repo, log = str(tmp_path / "state"), tmp_path / "repo", str(tmp_path / "rtd.log")
    proc = _serve(state)                       # first start: creates the dev tenant's key and token
    _wait_serving(proc, log, 0)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    model = mlp(4)
    private = keys.load_private(os.path.join(state, "dev-keys", "signing.pem"))
    files = pack.package_files(model, name="mlp", version="1.0.1", counter=1, private_key=private)
    put(str(repo), "", files)
    headers = {"authorization": f"Bearer {open(os.path.join(state, 'dev.token')).read().strip()}"}
    client = tc.InferenceServerClient(f"unix:{state}/rtd.sock")
    for restart in range(2):
        seen = os.path.getsize(log)
        proc = _serve(state, "--model-repository", str(repo), "--load-model", "mlp")
        try:
            _wait_serving(proc, log, seen)   # the listeners first; the `load` list loads in the background
            deadline = time.monotonic() + 60
            while not client.is_model_ready("mlp", headers=headers) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert client.is_model_ready("mlp", headers=headers)
            y, version = infer(client, headers)
            np.testing.assert_allclose(y, expected(model), rtol=1e-5, atol=1e-6)
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
        events = open(log).read()[seen:]
        # the first start loads it from the repository; the restart restores it from the registry
        # (a restore is a load followed by `restore`) and does not load it a second time
        assert (events.count("event=load "), events.count("event=restore ")) == (1, restart), events


def test_load_model_is_refused_with_a_config_file(tmp_path):
    result = subprocess.run([sys.executable, "-m", "rtd.daemon.main", "serve", "--config", str(tmp_path / "x.toml"),
                             "--load-model", "m"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "embedded default" in result.stderr
