"""A tenant's sandbox limits, as a new user meets them (a real `rtd serve`, real cgroups): the
shipped defaults agree with each other (a tenant allowed max_models models runs that many
small ones at once), an idle model is evicted to free whichever limit binds — memory or pids —
before a load is refused, and a refusal names the limit, its value and how to raise it."""
import contextlib
import os
import resource
import subprocess
import time

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from rtd.cli.client import Client
from rtd.daemon.config import Config, Limits
from rtd.daemon.serving.tenancy import SPARE_PIDS
from rtd.errors import Code, RtdError
from rtd.loader import keys, pack
from rtd.sandbox import load_policy
from tests.daemon.conftest import NEEDS_ROOT, RTD, Daemon, mlp
from tests.daemon.test_rtctl import cli, refused
from tests.daemon.test_serving import reference

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason=NEEDS_ROOT)
SMALL = """
name: "{name}"
instance_group [{{ count: {count} kind: KIND_CPU }}]
"""


def test_the_shipped_defaults_agree_with_each_other():
    """max_models small models, one worker each, fit the default policy's pids (helper, worker and
    one kernel thread per whole core) beside the zygote's spare, and its memory at a small
    worker's footprint; a tenant may also fill max_instances workers of one model."""
    limits, policy = Limits(), load_policy().limits
    per_worker = 1 + max(1, int(policy.cpu_cores))
    assert limits.max_models * per_worker + SPARE_PIDS <= policy.pids, (limits.max_models, per_worker, policy.pids)
    assert limits.max_instances * per_worker + SPARE_PIDS <= policy.pids
    assert limits.max_models * (32 << 20) <= policy.memory_bytes


def big_at_load() -> bytes:
    """Its warm-up alone (a fixed input shape) makes a 256 MiB tensor: the model, not a request,
    needs the memory."""
    s = numpy_helper.from_array(np.array([8192, 8192], np.int64), "S")
    z = numpy_helper.from_array(np.zeros(1, np.float32), "Z")
    graph = helper.make_graph([helper.make_node("Expand", ["V", "S"], ["E"]), helper.make_node("Add", ["E", "Z"], ["Y"])],
                              "big", [helper.make_tensor_value_info("V", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [8192, 8192])], [s, z])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


class Embedded:
    """`rtd serve` on its embedded default in `state`, with `flags`, as a user starts it."""

    def __init__(self, state, *flags):
        self.state, self.log = str(state), f"{state}.log"
        self.proc = subprocess.Popen([RTD, "serve", "--state-dir", self.state, "--no-tcp", *flags], stdout=subprocess.DEVNULL,
                                     stderr=open(self.log, "wb"))
        deadline = time.monotonic() + 60
        while "serving on" not in open(self.log).read():
            assert self.proc.poll() is None and time.monotonic() < deadline, open(self.log).read()
            time.sleep(0.1)

    def client(self) -> Client:
        with open(os.path.join(self.state, "dev.token")) as f:
            return Client(f"unix:{self.state}/rtd.sock", f.read().strip())

    def stop(self) -> None:
        self.proc.terminate()
        assert self.proc.wait(30) == 0, open(self.log).read()


def test_a_model_too_big_for_the_tenant_is_refused_naming_the_limit_and_the_flag_that_raises_it(tmp_path):
    (tmp_path / "big.onnx").write_bytes(big_at_load())
    state = tmp_path / "state"
    daemon = Embedded(state, "--memory-bytes", str(128 << 20))
    try:
        assert cli("pack", "big.onnx", "--name", "big", "--version", "1.0.0", "--key", state / "dev-keys/signing.pem",
                   "--out", "big.tar", cwd=tmp_path).returncode == 0
        line = refused(cli("load", "big.tar", "--state-dir", state, cwd=tmp_path), "E_RESOURCE_EXHAUSTED")
        assert "memory: loading the model" in line and f"limits.memory_bytes {128 << 20} (128 MiB" in line, line
        assert "rtd serve --memory-bytes" in line, line
    finally:
        daemon.stop()
    daemon = Embedded(state, "--memory-bytes", str(1 << 30))   # raised as the line says: it loads
    try:
        assert cli("load", "big.tar", "--state-dir", state, cwd=tmp_path).returncode == 0
        assert [(m.name, m.state) for m in daemon.client().index()] == [("big", "READY")]
    finally:
        daemon.stop()


def test_the_embedded_default_runs_max_models_small_models_at_once(tmp_path):
    daemon = Embedded(tmp_path / "state")
    try:
        client = daemon.client()
        key = keys.load_private(str(tmp_path / "state" / "dev-keys" / "signing.pem"))
        x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
        for i in range(Limits().max_models):
            client.load(f"m{i}", pack.package_files(mlp(i), name=f"m{i}", version="1.0.0", private_key=key))
        for i in range(Limits().max_models):   # each its own weights, in its own worker
            np.testing.assert_allclose(client.infer(f"m{i}", {"X": x})["Y"], reference(mlp(i), {"X": x})["Y"], rtol=1e-5, atol=1e-6)
        status = Client(f"unix:{daemon.state}/rtd.sock", None).status(open(os.path.join(daemon.state, "admin.token")).read().strip())
        [dev] = status["tenants"]
        assert all(m["serving"]["evictions"] == 0 and len(m["serving"]["instances"]) == 1 for m in dev["models"].values())
        assert dev["pids"] <= dev["pids_limit"] == load_policy().limits.pids, dev
    finally:
        daemon.stop()


def test_idle_models_are_evicted_to_free_pids_and_a_load_that_cannot_fit_names_the_limit(fresh_daemon):
    """pids = 8: the spare (2) and three one-core workers (2 each). A fourth and fifth model
    evict the least recently used idle ones instead of failing their fork; each model still
    answers (restarted from its sealed bytes on demand). A model whose own instances need more
    than the whole limit is refused, naming limits.pids and its value."""
    d = fresh_daemon(policies={"acme": {"pids": 8, "cpu_cores": 1.0}})
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    client = d.client("acme")
    for i in range(5):
        client.load(f"m{i}", d.package("acme", mlp(i), f"m{i}"))
    for i in [*range(5), *reversed(range(5))]:
        np.testing.assert_allclose(client.infer(f"m{i}", {"X": x})["Y"], reference(mlp(i), {"X": x})["Y"], rtol=1e-5, atol=1e-6)
    acme = d.tenant("acme")
    assert sum(m["serving"]["evictions"] for m in acme["models"].values()) >= 4 and acme["pids"] <= 8, acme
    assert d.metric("rtd_instance_ends_total{") == 0, "room was made by evicting, never by a refused fork"
    with pytest.raises(RtdError) as e:
        client.load("wide", d.package("acme", mlp(9), "wide", config=SMALL.format(name="wide", count=4).encode()))
    assert e.value.code is Code.E_RESOURCE_EXHAUSTED and "exceed limits.pids 8" in e.value.detail, e.value
    assert "raise it in the tenant's policy" in e.value.detail
    assert [m.name for m in client.index()] == [f"m{i}" for i in range(5)]   # the refusal changed nothing


def _nice_and_nice_limit(pid: int) -> tuple[int, str]:
    with open(f"/proc/{pid}/stat") as f:
        nice = int(f.read().rsplit(")", 1)[1].split()[16])   # field 19 of stat(5)
    with open(f"/proc/{pid}/limits") as f:
        limit = next(line.split()[3:5] for line in f if line.startswith("Max nice priority"))
    return nice, " ".join(limit)


def test_the_supervisor_runs_above_its_tenants_and_no_tenant_process_can_raise_itself(tmp_path):
    """The event loop every tenant's calls pass through is scheduled ahead of any tenant's own
    work (supervisor_nice, default -10); each worker is set back to nice 0 by its confinement
    and gets an RLIMIT_NICE of 0, whatever the daemon was started with (here nice -5 and, where
    root may raise limits, a nice limit of 30, which its fork server and workers would
    otherwise inherit): a tenant cannot take the supervisor's priority."""
    def started_high():
        os.nice(-5)
        with contextlib.suppress(ValueError):   # a root without CAP_SYS_RESOURCE cannot raise it
            resource.setrlimit(resource.RLIMIT_NICE, (30, 30))
    d = Daemon(tmp_path / "d")
    d.preexec = started_high
    d.start()
    try:
        d.client("acme").load("mlp", d.package("acme", mlp(1), "mlp"))
        supervisor_nice, _ = _nice_and_nice_limit(d.proc.pid)
        [instance] = d.instances("acme", "mlp")
        assert supervisor_nice == Config.supervisor_nice == -10
        assert _nice_and_nice_limit(instance["pid"]) == (0, "0 0")
        assert d.client("acme").infer("mlp", {"X": np.ones((1, 4), np.float32)})["Y"].shape == (1, 3)
    finally:
        d.stop()
