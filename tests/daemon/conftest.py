"""A real `rtd serve` subprocess on a real Unix socket with two tenants (acme, beta), each
with its own RSA key, trust store and token, plus helpers that build small ONNX models
with onnx.helper and sign them with the loader's own packer."""
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from rtd.cli.client import Client
from rtd.daemon.config import token_hash
from rtd.loader import keys, pack

RTD = os.path.join(os.path.dirname(sys.executable), "rtd")
TENANTS = ("acme", "beta")

NEEDS_ROOT = "rtd serve confines its workers with namespaces, cgroups and other uids: needs root"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mlp(weight_seed: int = 0, inner: int = 3) -> bytes:
    """X[N,4] → Relu(X·W + b) → Y[N,3]; the weights depend on the seed."""
    rng = np.random.default_rng(weight_seed)
    w = numpy_helper.from_array(rng.standard_normal((4, inner)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(inner).astype(np.float32), "B")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["H"]), helper.make_node("Add", ["H", "B"], ["Z"]),
         helper.make_node("Relu", ["Z"], ["Y"])], "mlp",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", inner])], [w, b])
    return _bytes(graph)


def slow_model(layers: int = 12, width: int = 384) -> bytes:
    """A chain of MatMuls: as slow as the batch it is given."""
    w = numpy_helper.from_array((np.eye(width) * 0.999).astype(np.float32), "W")
    nodes, prev = [], "X"
    for i in range(layers):
        nodes.append(helper.make_node("MatMul", [prev, "W"], [f"H{i}"]))
        prev = f"H{i}"
    nodes.append(helper.make_node("Identity", [prev], ["Y"]))
    graph = helper.make_graph(nodes, "slow", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", width])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", width])], [w])
    return _bytes(graph)


def memory_bomb() -> bytes:
    """Expand a scalar to the shape the request names, then add zero (Expand alone may be a
    broadcast view that takes no memory): the guard cannot know the size."""
    zero = numpy_helper.from_array(np.zeros(1, np.float32), "Z")
    graph = helper.make_graph(
        [helper.make_node("Expand", ["V", "S"], ["E"]), helper.make_node("Add", ["E", "Z"], ["Y"])], "bomb",
        [helper.make_tensor_value_info("V", TensorProto.FLOAT, [1]), helper.make_tensor_value_info("S", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["A", "B"])], [zero])
    return _bytes(graph)


def _bytes(graph) -> bytes:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


class Daemon:
    """One rtd serve process and what a test needs to talk to it."""

    def __init__(self, root, max_queue: int = 32, max_concurrency: int = 4, memory_bytes: int = 512 << 20,
                 listen: str = "", limits: dict | None = None, tenants=TENANTS, repository: str = "",
                 metrics: str = "", policies: dict | None = None, loads: dict | None = None):
        """`policies`: per tenant, [limits] keys of its sandbox policy over memory_bytes (e.g. gpu_devices);
        `loads`: per tenant, its `load` list (models of its repository loaded at start)."""
        self.root = str(root)
        self.state = os.path.join(self.root, "state")
        self.socket = os.path.join(self.state, "rtd.sock")
        self.metrics_port = free_port()
        self.tokens, self.keys, self.trust = {}, {}, {}
        self.admin_token = secrets.token_urlsafe(32)
        self.metrics_token = secrets.token_urlsafe(32)
        tenant_tables = []
        for i, tenant in enumerate(tenants):
            key_dir, trust = os.path.join(self.root, "keys", tenant), os.path.join(self.root, "trust", tenant)
            os.makedirs(trust)
            self.trust[tenant] = trust
            private, public = keys.write_keypair(key_dir)
            os.link(public, os.path.join(trust, os.path.basename(public)))
            self.keys[tenant] = keys.load_private(private)
            self.tokens[tenant] = secrets.token_urlsafe(32)
            tenant_tables.append(f"""
[[tenant]]
id = "{tenant}"
token_sha256 = ["{token_hash(self.tokens[tenant])}"]
trusted_keys = "{trust}"
uid = {62000 + i}
gid = {62000 + i}
{f"load = {json.dumps((loads or {})[tenant])}" if tenant in (loads or {}) else ""}
policy = {{ limits = {{ {", ".join(f"{k} = {v!r}" for k, v in
                        {"memory_bytes": memory_bytes, **(policies or {}).get(tenant, {})}.items())} }} }}
""")
        self.config = os.path.join(self.root, "rtd.toml")
        with open(self.config, "w") as f:
            f.write(f"""state_dir = "state"
{f'model_repository = "{repository}"' if repository else ""}
{listen}
[metrics]
port = {self.metrics_port}
token_sha256 = ["{token_hash(self.metrics_token)}"]
{metrics}
[admin]
token_sha256 = ["{token_hash(self.admin_token)}"]
[limits]
""" + "".join(f"{k} = {v!r}\n" for k, v in {
                "max_message_bytes": 16 << 20, "max_queue": max_queue, "max_concurrency": max_concurrency,
                "max_models": 8, "restart_backoff_s": 0.1, **(limits or {})}.items()) + "".join(tenant_tables))
        self.proc = None
        self.log = os.path.join(self.root, "rtd.log")
        self.prefix: list[str] = []  # e.g. setpriv, to run the daemon with fewer privileges
        self.preexec = None          # runs in the daemon's process before exec (e.g. to join a cgroup)

    def start(self, timeout: float = 60.0) -> "Daemon":
        if os.geteuid() != 0:
            pytest.skip(NEEDS_ROOT)
        seen = len(self.read_log()) if os.path.exists(self.log) else 0
        self.proc = subprocess.Popen([*self.prefix, RTD, "serve", "--config", self.config], stdout=subprocess.DEVNULL,
                                     stderr=open(self.log, "ab"), preexec_fn=self.preexec)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rtd serve exited {self.proc.returncode}: {self.read_log()}")
            if "serving on" in self.read_log()[seen:]:
                return self
            time.sleep(0.1)
        raise RuntimeError(f"rtd serve did not come up: {self.read_log()}")

    def stop(self) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def state_file(self, tenant: str, name: str) -> str:
        """A tenant's durable state file: registry.json or rollback.json (each with its .last-good)."""
        return os.path.join(self.state, "tenants", tenant, name)

    def registry(self) -> dict:
        """{tenant: {model: entry}} as the registry's files on disk say."""
        found = {}
        for tenant in sorted(os.listdir(os.path.join(self.state, "tenants"))):
            try:
                with open(self.state_file(tenant, "registry.json")) as f:
                    found[tenant] = json.load(f)["models"]
            except FileNotFoundError:
                continue
        return {t: models for t, models in found.items() if models}

    def read_log(self) -> str:
        with open(self.log, errors="replace") as f:
            return f.read()

    def url(self) -> str:
        return f"unix:{self.socket}"

    def client(self, tenant: str) -> Client:
        return Client(self.url(), self.tokens[tenant])

    def package(self, tenant: str, model: bytes, name: str, counter: int = 1, config: bytes | None = None) -> dict:
        return pack.package_files(model, name=name, version=f"1.0.{counter}", counter=counter,
                                  private_key=self.keys[tenant], config_bytes=config)

    def status(self) -> dict:
        return Client(self.url(), None).status(self.admin_token)

    def tenant(self, tenant: str) -> dict:
        return next(t for t in self.status()["tenants"] if t["tenant"] == tenant)

    def instances(self, tenant: str, name: str) -> list[dict]:
        """The live instances of the serving version of a model, as status shows them."""
        model = self.tenant(tenant)["models"].get(name) or {}
        return [i for i in (model.get("serving") or {}).get("instances", []) if i["live"]]

    def pids(self, tenant: str) -> dict:
        """{(model, instance index): host pid} of every live instance of a tenant."""
        return {(name, i["index"]): i["pid"] for name, model in self.tenant(tenant)["models"].items()
                for i in (model.get("serving") or {}).get("instances", []) if i["live"]}

    def wait_ready(self, tenant: str, name: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.instances(tenant, name) and self.tenant(tenant)["models"][name]["state"] == "READY":
                return
            time.sleep(0.05)
        raise AssertionError(f"{tenant}/{name} not ready again: {self.tenant(tenant)}")

    def scrape(self, path: str = "/metrics", token: str | None = "metrics") -> str:
        """The metrics listener's answer to GET `path` with the metrics token (or `token`)."""
        token = self.metrics_token if token == "metrics" else token
        request = urllib.request.Request(f"http://127.0.0.1:{self.metrics_port}{path}",
                                         headers={"Authorization": f"Bearer {token}"} if token else {})
        return urllib.request.urlopen(request, timeout=10).read().decode()

    def metric(self, line_start: str) -> float:
        """The sum of the series whose exposition line starts with `line_start`."""
        text = self.scrape()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(line_start))


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("rtd")).start()
    yield d
    assert d.stop() == 0, d.read_log()


@pytest.fixture
def fresh_daemon(tmp_path):
    """For tests that kill, overload or restart: a daemon of their own."""
    made = []

    def make(**kwargs):
        made.append(Daemon(tmp_path / f"d{len(made)}", **kwargs).start())
        return made[-1]
    yield make
    for d in made:
        d.stop()
