"""Metrics and statistics against a real `rtd serve` with two tenants: the raw exposition
carries Triton's names, types, HELP texts and labels exactly (parsed here by hand, so a
`_total` suffix cannot hide), counts move by exactly the requests sent, failures carry
Triton's reason, only GET /metrics answers, another local user reads no model names under
the defaults, and tritonclient's get_inference_statistics shows a tenant its own models only."""
import errno
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error

import numpy as np
import pytest
import tritonclient.grpc as tc
from tritonclient.utils import InferenceServerException

from rtd.daemon import config
from rtd.errors import Code, RtdError
from tests.daemon.conftest import RTD, memory_bomb, mlp

# Triton core src/metrics.cc: name -> (TYPE, HELP)
TRITON = {
    "nv_inference_request_success": ("counter", "Number of successful inference requests, all batch sizes"),
    "nv_inference_request_failure": ("counter", "Number of failed inference requests, all batch sizes"),
    "nv_inference_count": ("counter", "Number of inferences performed (does not include cached requests)"),
    "nv_inference_exec_count": ("counter", "Number of model executions performed (does not include cached requests)"),
    "nv_inference_request_duration_us": (
        "counter", "Cumulative inference request duration in microseconds (includes cached requests)"),
    "nv_inference_queue_duration_us": (
        "counter", "Cumulative inference queuing duration in microseconds (includes cached requests)"),
    "nv_inference_compute_input_duration_us": (
        "counter", "Cumulative compute input duration in microseconds (does not include cached requests)"),
    "nv_inference_compute_infer_duration_us": (
        "counter", "Cumulative compute inference duration in microseconds (does not include cached requests)"),
    "nv_inference_compute_output_duration_us": (
        "counter", "Cumulative inference compute output duration in microseconds (does not include cached requests)"),
    "nv_inference_pending_request_count": (
        "gauge", "Instantaneous number of pending requests awaiting execution per-model."),
    "nv_cpu_utilization": ("gauge", "CPU utilization rate [0.0 - 1.0]"),
    "nv_cpu_memory_total_bytes": ("gauge", "CPU total memory (RAM), in bytes"),
    "nv_cpu_memory_used_bytes": ("gauge", "CPU used memory (RAM), in bytes"),
}
PER_MODEL = [n for n in TRITON if n.startswith("nv_inference_")]
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
X = np.ones((1, 4), np.float32)


def parse(text: str) -> tuple[dict, dict, list]:
    """({name: TYPE}, {name: HELP}, [(name, {label: value}, value)]) from raw exposition text."""
    types, helps, samples = {}, {}, []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            name, kind = line[7:].split(" ", 1)
            types[name] = kind
        elif line.startswith("# HELP "):
            name, help_text = line[7:].split(" ", 1)
            helps[name] = help_text
        elif line:
            m = SAMPLE.match(line)
            assert m, f"not an exposition line: {line!r}"
            samples.append((m[1], dict(LABEL.findall(m[2] or "")), float(m[3])))
    return types, helps, samples


def value(samples, name: str, **labels) -> float:
    return sum(v for n, got, v in samples if n == name and labels.items() <= got.items())


@pytest.fixture(scope="module")
def counted(daemon):
    daemon.client("acme").load("counted", daemon.package("acme", mlp(3), "counted"))
    daemon.client("beta").load("counted", daemon.package("beta", mlp(4), "counted"))
    daemon.client("beta").load("beta_only", daemon.package("beta", mlp(5), "beta_only"))
    return daemon


def test_exposition_has_tritons_names_types_help_and_labels(counted):
    counted.client("acme").infer("counted", {"X": X})
    types, helps, samples = parse(counted.scrape())
    for name, (kind, help_text) in TRITON.items():
        assert types.get(name) == kind, f"# TYPE {name} {kind} missing: {types.get(name)}"
        assert helps[name] == help_text
    for name, labels, _ in samples:
        assert name in types, f"sample {name} has no # TYPE line"
        assert name in TRITON or name.startswith("rtd_"), name
        if name in PER_MODEL:
            extra = {"reason"} if name == "nv_inference_request_failure" else set()
            assert set(labels) == {"model", "version", "tenant"} | extra, (name, labels)
        elif name.startswith("nv_cpu_"):
            assert labels == {}
    assert not [n for n in types if n.startswith("nv_") and n.endswith(("_total", "_created"))]
    reasons = {labels["reason"] for n, labels, _ in samples
               if n == "nv_inference_request_failure" and labels["model"] == "counted" and labels["tenant"] == "acme"}
    assert reasons == {"REJECTED", "CANCELED", "BACKEND", "OTHER"}
    assert 0.0 <= value(samples, "nv_cpu_utilization") <= 1.0
    assert 0 < value(samples, "nv_cpu_memory_used_bytes") < value(samples, "nv_cpu_memory_total_bytes")
    for name in PER_MODEL:   # a model serving since its load has its series, zeros or not
        assert any(n == name and labels.get("model") == "beta_only" for n, labels, _ in samples), name


def test_counts_move_by_exactly_the_requests_sent(counted):
    acme = dict(model="counted", tenant="acme", version="1")
    _, _, before = parse(counted.scrape())
    for _ in range(3):
        counted.client("acme").infer("counted", {"X": X})
    with pytest.raises(RtdError) as e:
        counted.client("acme").infer("counted", {"X": np.ones((1, 5), np.float32)})
    assert e.value.code == Code.E_INPUT_INVALID
    _, _, after = parse(counted.scrape())

    def moved(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)
    assert moved("nv_inference_request_success", **acme) == 3
    assert moved("nv_inference_count", **acme) == 3
    assert moved("nv_inference_exec_count", **acme) == 3
    assert moved("nv_inference_request_failure", **acme) == 1
    assert moved("nv_inference_request_failure", reason="OTHER", **acme) == 1
    assert moved("nv_inference_request_success", model="counted", tenant="beta") == 0
    assert value(after, "nv_inference_pending_request_count", **acme) == 0
    phases = [moved(f"nv_inference_{p}_duration_us", **acme) for p in ("queue", "compute_input", "compute_infer",
                                                                        "compute_output")]
    assert all(p >= 0 for p in phases) and moved("nv_inference_compute_infer_duration_us", **acme) > 0
    assert moved("nv_inference_compute_input_duration_us", **acme) > 0
    assert moved("nv_inference_compute_output_duration_us", **acme) > 0
    assert sum(phases) <= moved("nv_inference_request_duration_us", **acme) + 4   # µs truncation per phase


def test_a_failure_in_the_worker_is_backend(counted):
    counted.client("acme").load("bomb", counted.package("acme", memory_bomb(), "bomb"))
    with pytest.raises(RtdError) as e:
        counted.client("acme").infer("bomb", {"V": np.ones(1, np.float32), "S": np.array([40000, 40000], np.int64)})
    assert e.value.code in (Code.E_SANDBOX_KILLED, Code.E_RESOURCE_EXHAUSTED), e.value
    assert counted.metric('nv_inference_request_failure{model="bomb",reason="BACKEND",tenant="acme"') == 1
    assert counted.metric('nv_inference_request_failure{model="bomb"') == 1
    counted.client("acme").unload("bomb")


def test_only_get_metrics_answers_and_only_with_a_token(counted):
    for path in ("/", "/metrics/", "/v2/models", "/metrics2", "/../metrics"):
        with pytest.raises(urllib.error.HTTPError) as e:
            counted.scrape(path)
        assert e.value.code == 404, path
    assert "nv_inference_count" in counted.scrape(token=counted.admin_token)
    for token in (None, "wrong", counted.tokens["acme"]):
        with pytest.raises(urllib.error.HTTPError) as e:
            counted.scrape(token=token)
        assert e.value.code == 401 and b"counted" not in e.value.read()
    with socket.create_connection(("127.0.0.1", counted.metrics_port)) as s:
        s.sendall(b"POST /metrics HTTP/1.1\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 405")


NOBODY = 65534   # nobody:nogroup
STRANGER = 62999


def get_as(uid: int, gid: int, family: int, address) -> str:
    """GET /metrics (no token) from a forked child that dropped to uid/gid with no other groups:
    the answer, or `refused <errno>` when it cannot connect."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child execs nothing: only the socket module is used
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            with socket.socket(family) as s:
                s.settimeout(10)
                try:
                    s.connect(address)
                except OSError as e:
                    out = f"refused {e.errno}".encode()
                else:
                    s.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
                    out = b"".join(iter(lambda: s.recv(65536), b""))
            os.write(w, out)
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read()
    os.waitpid(pid, 0)
    return out.decode()


def test_another_local_user_reads_no_model_names_over_tcp(counted):
    got = get_as(NOBODY, NOBODY, socket.AF_INET, ("127.0.0.1", counted.metrics_port))
    assert got.startswith("HTTP/1.1 401") and "counted" not in got and "nv_inference" not in got, got


def test_the_embedded_default_serves_metrics_to_its_own_user_only(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root: the embedded default's tenant runs as its own uid")
    parent = tempfile.mkdtemp(prefix="rtd-default-")   # others may traverse it: only the modes below protect
    os.chmod(parent, 0o755)
    state = os.path.join(parent, "state")
    log = tmp_path / "rtd.log"
    proc = subprocess.Popen([RTD, "serve", "--state-dir", state], stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
    try:
        deadline = time.monotonic() + 60
        while "serving on" not in log.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            time.sleep(0.1)
        sock = os.path.join(state, "metrics.sock")
        assert f"metrics unix:{sock} (mode 0600)" in log.read_text()
        assert os.stat(sock).st_mode & 0o777 == 0o600 and os.stat(state).st_mode & 0o777 == 0o700
        assert "# TYPE nv_inference_request_success counter" in get_as(0, 0, socket.AF_UNIX, sock)
        assert get_as(NOBODY, NOBODY, socket.AF_UNIX, sock) == f"refused {errno.EACCES}"
        os.chmod(state, 0o755)   # even with its directory open, the socket is its owner's only
        assert get_as(NOBODY, NOBODY, socket.AF_UNIX, sock) == f"refused {errno.EACCES}"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()
        subprocess.run(["rm", "-rf", parent], check=False)


def test_a_group_may_be_let_in_on_a_unix_socket(fresh_daemon):
    parent = tempfile.mkdtemp(prefix="rtd-metrics-")
    os.chmod(parent, 0o755)
    sock = os.path.join(parent, "metrics.sock")
    try:
        d = fresh_daemon(metrics=f'unix = "{sock}"\nunix_mode = "0660"\nunix_group = "nogroup"')
        d.client("acme").load("grouped", d.package("acme", mlp(1), "grouped"))
        assert 'model="grouped"' in get_as(NOBODY, NOBODY, socket.AF_UNIX, sock)
        assert get_as(STRANGER, STRANGER, socket.AF_UNIX, sock) == f"refused {errno.EACCES}"
    finally:
        subprocess.run(["rm", "-rf", parent], check=False)


def test_defaults_are_stated(tmp_path):
    plain = config.parse('state_dir = "s"\n', base=str(tmp_path))
    assert (plain.metrics_port, plain.metrics_unix) == (0, "")   # a config file without [metrics]: none
    with pytest.raises(config.ConfigError, match="needs metrics.token_sha256"):
        config.parse('state_dir = "s"\n[metrics]\nport = 9102\n', base=str(tmp_path))
    default = config.embedded_default(str(tmp_path / "state"))
    assert default.metrics_unix == str(tmp_path / "state" / "metrics.sock") and default.metrics_unix_mode == 0o600
    assert default.metrics_port == 0


def test_model_statistics_show_a_tenant_its_own_models_only(counted):
    client = tc.InferenceServerClient(counted.url())
    acme, beta = ({"authorization": f"Bearer {counted.tokens[t]}"} for t in ("acme", "beta"))
    before = client.get_inference_statistics("counted", headers=acme).model_stats[0]
    for _ in range(2):
        counted.client("acme").infer("counted", {"X": X})
    [stats] = client.get_inference_statistics("counted", headers=acme).model_stats
    assert (stats.name, stats.version) == ("counted", "1")
    assert stats.inference_count - before.inference_count == 2
    assert stats.execution_count - before.execution_count == 2
    infer = stats.inference_stats
    assert infer.success.count - before.inference_stats.success.count == 2
    assert infer.queue.count == infer.success.count and infer.compute_infer.ns > 0 and infer.compute_input.ns > 0
    assert abs(stats.last_inference - time.time() * 1000) < 60_000
    _, _, samples = parse(counted.scrape())
    labels = dict(model="counted", tenant="acme", version="1")
    assert value(samples, "nv_inference_request_success", **labels) == infer.success.count
    assert value(samples, "nv_inference_compute_infer_duration_us", **labels) == infer.compute_infer.ns // 1000
    assert value(samples, "nv_inference_request_failure", **labels) == infer.fail.count
    mine = {s.name for s in client.get_inference_statistics("", headers=acme).model_stats}
    assert "counted" in mine and "beta_only" not in mine
    assert mine == {m.name for m in client.get_model_repository_index(headers=acme).models if m.state == "READY"}
    theirs = client.get_inference_statistics("counted", headers=beta).model_stats[0]
    assert (theirs.inference_count, theirs.execution_count) == (0, 0)   # beta never ran its "counted"
    for name, version in (("beta_only", ""), ("counted", "7"), ("nothing", "")):
        with pytest.raises(InferenceServerException) as e:
            client.get_inference_statistics(name, version, headers=acme)
        assert e.value.status() == "StatusCode.NOT_FOUND", (name, version)
    with pytest.raises(InferenceServerException) as e:
        client.get_inference_statistics("", headers={"authorization": "Bearer nope"})
    assert e.value.status() == "StatusCode.UNAUTHENTICATED"
