"""The model lifecycle against a real `rtd serve` with two tenants: client deadlines never
kill a worker or count against a model, request-caused memory kills never mark a model
failed, hangs do (and reload or unload + load of the same package leaves FAILED), a new
version serves only once ready while the old one keeps answering, unload drains, requests
wait out a restart instead of being refused, and `instance_group` gives real concurrency.
The other tenant's requests succeed with the right results throughout."""
import concurrent.futures
import os
import signal
import threading
import time

import numpy as np
import pytest

from rtd.errors import Code, RtdError
from rtd.daemon.serving.lifecycle import BASE_WORKER_BYTES
from tests.daemon.conftest import memory_bomb, mlp, slow_model
from tests.daemon.test_budgets import Calm
from tests.daemon.test_serving import reference

X = np.array([[1, 2, 3, 4], [0.5, -1, 2, 0]], np.float32)
INSTANCES_CONFIG = b"""
name: "slow"
instance_group [{ count: 2 kind: KIND_CPU }]
"""


def in_flight(d, tenant, name) -> int:
    return sum(i["in_flight"] for i in d.instances(tenant, name))


class Sampler:
    """Samples a model's requests in flight in its workers while a block runs."""

    def __init__(self, d, tenant, name):
        self.d, self.tenant, self.name, self.seen, self.stop = d, tenant, name, [], threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _run(self):
        while not self.stop.is_set():
            self.seen.append([i["in_flight"] for i in self.d.instances(self.tenant, self.name)])
            time.sleep(0.01)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def test_a_storm_of_tiny_deadlines_kills_nothing_and_never_exceeds_max_concurrency(fresh_daemon):
    d = fresh_daemon(max_concurrency=2)
    d.client("acme").load("slow", d.package("acme", slow_model(), "slow"))
    d.client("beta").load("mlp", d.package("beta", mlp(2), "mlp"))
    [before] = d.instances("acme", "slow")
    batch = {"X": np.ones((300, 384), np.float32)}
    codes, details = [], []
    with Calm(d), Sampler(d, "acme", "slow") as sampler, concurrent.futures.ThreadPoolExecutor(16) as pool:
        def tiny():
            try:
                d.client("acme").infer("slow", batch, timeout=0.001 + np.random.default_rng().random() * 0.05)
                codes.append("ok")
            except RtdError as e:
                codes.append(e.code)
                details.append(f"{e.code.name}: {e.detail}")
        for f in [pool.submit(tiny) for _ in range(60)]:
            f.result()
    # the details name what else came back (a flake once gave one E_INTERNAL whose gRPC status was not kept)
    assert set(codes) <= {"ok", Code.E_DEADLINE} and Code.E_DEADLINE in codes, sorted(set(details))
    assert max(sum(s) for s in sampler.seen) <= 2, "a slot stays taken until the worker has finished"
    [after] = d.instances("acme", "slow")
    assert after["pid"] == before["pid"], "no deadline killed the worker"
    assert d.metric("rtd_instance_ends_total{") == 0
    assert [m.state for m in d.client("acme").index()] == ["READY"]
    np.testing.assert_allclose(d.client("acme").infer("slow", {"X": np.ones((1, 384), np.float32)})["Y"],
                               np.full((1, 384), 0.999 ** 12, np.float32), rtol=1e-4)


def test_requests_that_exhaust_memory_never_fail_the_model(fresh_daemon):
    d = fresh_daemon(memory_bytes=256 << 20, limits=dict(crash_limit=2))
    d.client("acme").load("bomb", d.package("acme", memory_bomb(), "bomb"))
    d.client("beta").load("mlp", d.package("beta", mlp(2), "mlp"))
    bomb = {"V": np.ones(1, np.float32), "S": np.array([40000, 40000], np.int64)}
    with Calm(d):
        for _ in range(4):   # twice the crash limit
            d.wait_ready("acme", "bomb")
            with pytest.raises(RtdError) as e:
                d.client("acme").infer("bomb", bomb)
            assert e.value.code in (Code.E_SANDBOX_KILLED, Code.E_RESOURCE_EXHAUSTED), e.value
        d.wait_ready("acme", "bomb")
        got = d.client("acme").infer("bomb", {"V": np.full(1, 2, np.float32), "S": np.array([2, 3], np.int64)})["Y"]
        np.testing.assert_array_equal(got, np.full((2, 3), 2, np.float32))
    [entry] = d.client("acme").index()
    assert entry.state == "READY"


def test_hangs_fail_a_model_and_reload_or_unload_and_load_bring_it_back(fresh_daemon):
    d = fresh_daemon(limits=dict(request_timeout_s=1.0, crash_limit=2))
    package = d.package("acme", slow_model(layers=240), "slow")
    d.client("acme").load("slow", package)
    d.client("beta").load("mlp", d.package("beta", mlp(2), "mlp"))
    hang = {"X": np.ones((6000, 384), np.float32)}   # seconds of work: past request_timeout_s
    small = {"X": np.ones((1, 384), np.float32)}
    with Calm(d):
        for _ in range(2):
            d.wait_ready("acme", "slow")
            with pytest.raises(RtdError) as e:
                d.client("acme").infer("slow", hang, timeout=30)
            assert e.value.code == Code.E_WORKER_CRASHED and "request_timeout_s" in e.value.detail
        with pytest.raises(RtdError) as e:
            d.client("acme").infer("slow", small)
        assert e.value.code == Code.E_MODEL_FAILED
        [entry] = d.client("acme").index()
        assert entry.state == "FAILED" and "2 times in a row" in entry.reason
        d.client("acme").load("slow", {})                           # reload by name
        assert d.client("acme").infer("slow", small)["Y"].shape == (1, 384)
        for _ in range(2):
            d.wait_ready("acme", "slow")
            with pytest.raises(RtdError):
                d.client("acme").infer("slow", hang, timeout=30)
        assert [m.state for m in d.client("acme").index()] == ["FAILED"]
        d.client("acme").unload("slow")
        d.client("acme").load("slow", package)                     # the identical signed package: no rollback
        assert d.client("acme").infer("slow", small)["Y"].shape == (1, 384)
        with pytest.raises(RtdError) as e:                          # another package at the same counter is one
            d.client("acme").load("slow", d.package("acme", slow_model(layers=3), "slow"))
        assert e.value.code == Code.E_ROLLBACK and "--counter 2" in e.value.detail


def test_a_new_version_serves_only_once_ready_and_no_request_fails_meanwhile(fresh_daemon):
    d = fresh_daemon()
    d.client("acme").load("m", d.package("acme", mlp(1), "m", counter=1))
    d.client("beta").load("mlp", d.package("beta", mlp(2), "mlp"))
    want = {1: reference(mlp(1), {"X": X})["Y"], 2: reference(mlp(7), {"X": X})["Y"]}
    seen, errors, stop = set(), [], threading.Event()

    def keep_asking():
        client = d.client("acme")
        while not stop.is_set():
            try:
                got = client.infer("m", {"X": X})["Y"]
                seen.add(next(v for v, w in want.items() if np.allclose(got, w, rtol=1e-5, atol=1e-6)))
            except (RtdError, StopIteration) as e:
                errors.append(e)
    threads = [threading.Thread(target=keep_asking) for _ in range(3)]
    with Calm(d):
        for t in threads:
            t.start()
        time.sleep(0.3)
        d.client("acme").load("m", d.package("acme", mlp(7), "m", counter=2))
        time.sleep(0.3)
        stop.set()
        for t in threads:
            t.join()
    assert errors == [] and seen == {1, 2}
    np.testing.assert_allclose(d.client("acme").infer("m", {"X": X})["Y"], want[2], rtol=1e-5, atol=1e-6)
    assert [m.version for m in d.client("acme").index()] == ["2"]


def test_unload_drains_requests_in_flight(fresh_daemon):
    d = fresh_daemon()
    d.client("acme").load("slow", d.package("acme", slow_model(), "slow"))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        running = pool.submit(d.client("acme").infer, "slow", {"X": np.ones((3000, 384), np.float32)}, None, 120)
        while in_flight(d, "acme", "slow") == 0:
            time.sleep(0.01)
        d.client("acme").unload("slow")
        assert running.result()["Y"].shape == (3000, 384)
    with pytest.raises(RtdError) as e:
        d.client("acme").infer("slow", {"X": np.ones((1, 384), np.float32)})
    assert e.value.code == Code.E_MODEL_NOT_FOUND


def test_a_request_during_a_restart_waits_for_the_worker(fresh_daemon):
    d = fresh_daemon(limits=dict(restart_backoff_s=0.5))
    d.client("acme").load("m", d.package("acme", mlp(1), "m"))
    [instance] = d.instances("acme", "m")
    os.kill(instance["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 10
    while d.instances("acme", "m") and time.monotonic() < deadline:
        time.sleep(0.01)
    np.testing.assert_allclose(d.client("acme").infer("m", {"X": X}, timeout=30)["Y"], reference(mlp(1), {"X": X})["Y"],
                               rtol=1e-5, atol=1e-6)
    assert d.metric('rtd_instance_ends_total{ending="crashed",model="m",tenant="acme"}') == 1


def test_instance_group_runs_requests_concurrently_in_separate_workers(fresh_daemon):
    d = fresh_daemon()
    d.client("acme").load("slow", d.package("acme", slow_model(), "slow", config=INSTANCES_CONFIG))
    instances = d.instances("acme", "slow")
    assert len(instances) == 2 and len({i["pid"] for i in instances}) == 2
    batch = {"X": np.ones((3000, 384), np.float32)}
    with Sampler(d, "acme", "slow") as sampler, concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = [f.result() for f in [pool.submit(d.client("acme").infer, "slow", batch, None, 120) for _ in range(2)]]
    assert all(r["Y"].shape == (3000, 384) for r in results)
    assert [1, 1] in sampler.seen, "both instances ran a request at the same time"
    with pytest.raises(RtdError) as e:
        d.client("acme").load("many", d.package("acme", slow_model(), "many", config=b"""
name: "many"
instance_group [{ count: 9 }]
"""))
    assert e.value.code == Code.E_CONFIG_INVALID and "max_instances" in e.value.detail


def wide(seed: int, megabytes: int = 40) -> bytes:
    """Y = X·W with a W of `megabytes` MiB: a model whose worker holds that much."""
    from onnx import TensorProto, helper, numpy_helper
    from tests.daemon.conftest import _bytes
    cols = (megabytes << 20) // (4 * 256)
    w = numpy_helper.from_array(np.random.default_rng(seed).standard_normal((256, cols)).astype(np.float32), "W")
    graph = helper.make_graph([helper.make_node("MatMul", ["X", "W"], ["Y"])], "wide",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 256])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", cols])], [w])
    return _bytes(graph)


def test_idle_instances_are_evicted_to_make_room_and_come_back_on_demand(fresh_daemon):
    first, second = wide(1), wide(2)
    x = np.random.default_rng(0).standard_normal((2, 256)).astype(np.float32)
    probe = fresh_daemon(limits=dict(max_message_bytes=64 << 20))   # how much one such worker holds here
    probe.client("acme").load("first", probe.package("acme", first, "first"))
    resident = probe.tenant("acme")["models"]["first"]["serving"]["resident_bytes"]
    probe.stop()
    assert resident > 40 << 20, "the instance's resident size was measured after it loaded"
    estimate = BASE_WORKER_BYTES + 2 * len(second)   # what a version not yet measured is thought to need
    d = fresh_daemon(memory_bytes=resident + estimate - (1 << 20), limits=dict(max_message_bytes=64 << 20))
    d.client("acme").load("first", d.package("acme", first, "first"))
    d.client("acme").infer("first", {"X": x})
    d.client("acme").load("second", d.package("acme", second, "second"))   # does not fit beside the first
    tenant = d.tenant("acme")
    assert tenant["models"]["first"]["serving"]["evictions"] == 1 and not d.instances("acme", "first")
    assert tenant["models"]["first"]["state"] == "READY"   # evicted, not unavailable: a request brings it back
    assert d.metric('rtd_evictions_total{model="first",tenant="acme"}') == 1
    np.testing.assert_allclose(d.client("acme").infer("first", {"X": x})["Y"], reference(first, {"X": x})["Y"],
                               rtol=1e-4, atol=1e-4)   # restarted from its sealed bytes on demand
    np.testing.assert_allclose(d.client("acme").infer("second", {"X": x})["Y"], reference(second, {"X": x})["Y"],
                               rtol=1e-4, atol=1e-4)
    assert d.metric("rtd_instance_ends_total{") == 0, "room was made by evicting, never by the OOM killer"
