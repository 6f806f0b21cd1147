"""A hostile tenant against a real `rtd serve` with two tenants: whatever it makes the
supervisor hold is bounded and charged to it, it is refused RESOURCE_EXHAUSTED past its
budgets, and the other tenant's requests all succeed with the right results meanwhile.

Covers the supervisor findings: responses a client never reads (memory amplification),
responses larger than max_message_bytes, idle and unauthenticated connections (fds), one
tenant flooding the shared front (starvation)."""
import concurrent.futures
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import pytest

from rtd.daemon.serving.budgets import RESERVE
from rtd.cli.client import Client
from rtd.errors import Code, RtdError
from rtd.proto import grpc_service_pb2 as pb
from tests.daemon.conftest import memory_bomb, mlp, slow_model
from tests.daemon.rawh2 import RawClient
from tests.daemon.test_serving import reference

X = np.array([[1, 2, 3, 4], [0.5, -1, 2, 0]], np.float32)


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) << 10 for line in f if line.startswith("VmRSS:"))


def bomb_request(rows: int, cols: int) -> bytes:
    """A request of a few dozen bytes whose response is rows × cols float32."""
    inputs = [pb.ModelInferRequest.InferInputTensor(name="V", datatype="FP32", shape=[1]),
              pb.ModelInferRequest.InferInputTensor(name="S", datatype="INT64", shape=[2])]
    return pb.ModelInferRequest(model_name="bomb", inputs=inputs, raw_input_contents=[
        np.ones(1, np.float32).tobytes(), np.array([rows, cols], np.int64).tobytes()]).SerializeToString()


class Calm:
    """The other tenant, sending requests all along and checking every answer."""

    def __init__(self, daemon, tenant="beta"):
        self.client, self.want = daemon.client(tenant), reference(mlp(2), {"X": X})["Y"]
        self.stop, self.done, self.errors = threading.Event(), 0, []
        self.thread = threading.Thread(target=self._run)

    def _run(self):
        while not self.stop.is_set():
            try:
                np.testing.assert_allclose(self.client.infer("mlp", {"X": X}, timeout=30)["Y"], self.want,
                                           rtol=1e-5, atol=1e-6)
                self.done += 1
            except (RtdError, AssertionError) as e:
                self.errors.append(e)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(60)
        assert self.errors == [] and self.done > 0, (self.errors[:3], self.done)


def two_tenants(fresh_daemon, **limits):
    d = fresh_daemon(limits=limits)
    d.client("acme").load("bomb", d.package("acme", memory_bomb(), "bomb"))
    d.client("beta").load("mlp", d.package("beta", mlp(2), "mlp"))
    return d


@pytest.mark.parametrize("never", ["opens its window", "reads its socket"])
def test_responses_a_client_never_takes_are_bounded_by_its_budget(fresh_daemon, never):
    budget = 32 << 20
    d = two_tenants(fresh_daemon, tenant_response_bytes=budget)
    before = rss(d.proc.pid)
    attacker = RawClient(d.socket, d.tokens["acme"], window=0 if never == "opens its window" else 2**31 - 1)
    with Calm(d):
        calls = 24   # within its request budget (max_queue): each refusal below is the response budget's
        sids = [attacker.call("ModelInfer", bomb_request(1024, 1024)) for _ in range(calls)]   # × 4 MiB
        expected = calls - (budget - budget // RESERVE) // (4 << 20)    # what does not fit the budget
        statuses, deadline = {}, time.monotonic() + 60
        while d.tenant("acme")["budgets"]["response_bytes"]["refused"] < expected and time.monotonic() < deadline:
            if never == "opens its window":
                statuses.update(attacker.statuses(0.5))
            else:
                time.sleep(0.2)
        usage = d.tenant("acme")["budgets"]["response_bytes"]
        assert usage["refused"] >= expected and 0 < usage["used"] <= budget - budget // RESERVE
        if never == "opens its window":   # refusals in a row are answered after a growing back-off
            deadline = time.monotonic() + 30
            while len(statuses) < expected and time.monotonic() < deadline:
                statuses.update(attacker.statuses(0.5))
            assert len(statuses) >= expected and set(statuses) < set(sids)
            assert all(code == 8 and "response_bytes" in message for code, message in statuses.values())
        assert rss(d.proc.pid) - before < budget, "what the supervisor holds stays within the budget"
        attacker.close()
        deadline = time.monotonic() + 30
        while d.tenant("acme")["budgets"]["response_bytes"]["used"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert d.tenant("acme")["budgets"]["response_bytes"]["used"] == 0, "the charges go with the connection"
    assert d.client("acme").infer("bomb", {"V": np.ones(1, np.float32), "S": np.array([2, 3])})["Y"].shape == (2, 3)


def test_a_response_beyond_max_message_bytes_is_refused_before_it_is_built(fresh_daemon):
    d = two_tenants(fresh_daemon)   # max_message_bytes: 16 MiB
    before = rss(d.proc.pid)
    with Calm(d):
        for _ in range(3):
            with pytest.raises(RtdError) as e:
                d.client("acme").infer("bomb", {"V": np.ones(1, np.float32), "S": np.array([4096, 4096])})  # 64 MiB
            assert e.value.code == Code.E_MESSAGE_TOO_LARGE and "67108864" in e.value.detail
    assert rss(d.proc.pid) - before < 16 << 20


IDLE_FLOOD = os.path.join(os.path.dirname(__file__), "idle_flood.py")


@pytest.fixture
def public_dir():
    """A directory another uid can reach (pytest's own tmp tree is root's alone)."""
    path = tempfile.mkdtemp(prefix="rtd-public-")
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_idle_connections_of_another_uid_are_capped_and_closed(fresh_daemon, public_dir):
    socket_path = os.path.join(public_dir, "rtd.sock")
    d = fresh_daemon(limits=dict(max_connections_per_peer=20, connection_auth_timeout_s=1.0),
                     listen=f'[listen]\nunix = "{socket_path}"\nunix_mode = "0666"\n')
    d.socket = socket_path
    d.client("beta").load("mlp", d.package("beta", mlp(2), "mlp"))
    with Calm(d):
        attacker = subprocess.run([sys.executable, IDLE_FLOOD, d.socket, "300", "2.0"], capture_output=True,
                                  text=True, timeout=60)
        assert attacker.returncode == 0, attacker.stderr
        _, _, at_first, later = map(int, attacker.stdout.split())
        assert at_first <= 20, "past the per-peer cap a connection is closed at accept"
        assert later == 0, "connections that send no authenticated call are closed after connection_auth_timeout_s"


def test_a_connection_with_an_authenticated_call_stays_and_tenant_connections_are_capped(fresh_daemon):
    d = fresh_daemon(limits=dict(connection_auth_timeout_s=1.0, tenant_connections=8))
    d.client("beta").load("mlp", d.package("beta", mlp(2), "mlp"))
    kept = d.client("beta")
    kept.infer("mlp", {"X": X})
    time.sleep(2.0)
    np.testing.assert_allclose(kept.infer("mlp", {"X": X})["Y"], reference(mlp(2), {"X": X})["Y"], rtol=1e-5, atol=1e-6)
    # grpcio shares one connection among channels unless each keeps its own subchannel pool
    clients = [Client(d.url(), d.tokens["acme"], options=[("grpc.use_local_subchannel_pool", 1)]) for _ in range(12)]
    refused = []
    for c in clients:
        try:
            c.index()
        except RtdError as e:
            refused.append(e)
    # index is a control call: it may use the reserve as well
    assert len(refused) == 12 - 8 and all(e.code == Code.E_BUDGET_EXCEEDED and "connections" in e.detail for e in refused)
    with Calm(d):
        time.sleep(0.5)


def test_a_flooding_tenant_is_refused_and_the_other_keeps_working(fresh_daemon):
    d = fresh_daemon(max_queue=8, max_concurrency=2)
    d.client("acme").load("slow", d.package("acme", slow_model(), "slow"))
    d.client("beta").load("mlp", d.package("beta", mlp(2), "mlp"))
    batch = {"X": np.ones((600, 384), np.float32)}
    outcomes = []

    def flood():
        try:
            d.client("acme").infer("slow", batch, timeout=120)
            outcomes.append("ok")
        except RtdError as e:
            outcomes.append(e.code)
    with Calm(d) as calm, concurrent.futures.ThreadPoolExecutor(20) as pool:
        for _ in range(20):   # 10 × its concurrency
            pool.submit(flood)
        time.sleep(1.0)
    assert Code.E_BUDGET_EXCEEDED in outcomes and "ok" in outcomes
    assert set(outcomes) <= {"ok", Code.E_BUDGET_EXCEEDED}
    assert calm.done > 0
