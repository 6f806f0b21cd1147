"""Faults against a real `rtd serve`: a worker SIGKILLed mid-request, a memory bomb
OOM-killed by its cgroup, a model that keeps killing its worker, a daemon restart, and
overload. Each time only the affected tenant sees errors and service comes back."""
import concurrent.futures
import os
import re
import shutil
import signal
import threading
import time

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from rtd.errors import Code, RtdError
from rtd.sandbox import detect_layout
from tests.daemon.conftest import Daemon, _bytes, memory_bomb, mlp, slow_model


def test_worker_sigkill_mid_request_fails_only_that_tenant(fresh_daemon):
    d = fresh_daemon()
    layers = 240  # seconds of work for the batch below, so the kill lands mid-request however fast the executor
    d.client("acme").load("slow", d.package("acme", slow_model(layers), "slow"))
    d.client("beta").load("mlp", d.package("beta", mlp(1), "mlp"))
    [instance] = d.instances("acme", "slow")
    pid = instance["pid"]
    big = np.ones((6000, 384), np.float32)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        doomed = pool.submit(d.client("acme").infer, "slow", {"X": big})
        time.sleep(0.5)
        assert not doomed.done(), "the request should still be running when the worker is killed"
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(RtdError) as e:
            doomed.result(timeout=60)
    assert e.value.code.status == "UNAVAILABLE" and "worker ended" in e.value.detail
    x = np.ones((1, 4), np.float32)
    assert d.client("beta").infer("mlp", {"X": x})["Y"].shape == (1, 3)  # the other tenant never noticed
    d.wait_ready("acme", "slow")
    got = d.client("acme").infer("slow", {"X": np.ones((2, 384), np.float32)})["Y"]
    np.testing.assert_allclose(got, np.full((2, 384), 0.999 ** layers, np.float32), rtol=1e-4)
    assert [i["pid"] for i in d.instances("acme", "slow")] != [pid]
    assert d.metric('rtd_instance_ends_total{ending="crashed",model="slow",tenant="acme"}') == 1
    assert d.metric('rtd_instance_ends_total{') == 1   # beta's instance never ended


def test_memory_bomb_is_oom_killed_and_the_other_tenant_is_unaffected(fresh_daemon):
    d = fresh_daemon(memory_bytes=256 << 20)
    d.client("acme").load("bomb", d.package("acme", memory_bomb(), "bomb"))
    d.client("acme").load("mlp", d.package("acme", mlp(1), "mlp"))
    d.client("beta").load("mlp", d.package("beta", mlp(2), "mlp"))
    with pytest.raises(RtdError) as e:
        d.client("acme").infer("bomb", {"V": np.ones(1, np.float32), "S": np.array([40000, 40000], np.int64)})
    assert e.value.code == Code.E_RESOURCE_EXHAUSTED and e.value.detail.startswith("memory: "), e.value
    assert f"limits.memory_bytes {256 << 20} (256 MiB" in e.value.detail and "--memory-bytes" in e.value.detail, e.value
    x = np.ones((1, 4), np.float32)
    assert d.client("beta").infer("mlp", {"X": x})["Y"].shape == (1, 3)
    d.wait_ready("acme", "mlp")
    assert d.client("acme").infer("mlp", {"X": x})["Y"].shape == (1, 3)
    assert d.metric('rtd_instance_ends_total{ending="resource",model="bomb",tenant="acme"}') >= 1
    assert d.metric('rtd_instance_ends_total{') == d.metric('rtd_instance_ends_total{ending="resource",model="bomb"')


def test_daemon_restart_restores_models(fresh_daemon):
    d = fresh_daemon()
    x = np.ones((3, 4), np.float32)
    d.client("acme").load("mlp", d.package("acme", mlp(4), "mlp"))
    d.client("beta").load("mlp", d.package("beta", mlp(5), "mlp", counter=4))
    before = {t: d.client(t).infer("mlp", {"X": x})["Y"] for t in ("acme", "beta")}
    assert d.stop() == 0
    assert not os.path.exists(d.socket)
    d.start()
    for tenant in ("acme", "beta"):
        np.testing.assert_array_equal(d.client(tenant).infer("mlp", {"X": x})["Y"], before[tenant])
    assert [m.version for m in d.client("beta").index()] == ["4"]
    with pytest.raises(RtdError) as e:  # the rollback mark survived the restart too
        d.client("beta").load("mlp", d.package("beta", mlp(5), "mlp", counter=3))
    assert e.value.code == Code.E_ROLLBACK


def test_overload_is_refused_at_once_and_the_queue_stays_bounded(fresh_daemon):
    d = fresh_daemon(max_queue=3, max_concurrency=1)
    d.client("acme").load("slow", d.package("acme", slow_model(), "slow"))
    d.client("beta").load("mlp", d.package("beta", mlp(1), "mlp"))
    batch = {"X": np.ones((1500, 384), np.float32)}
    outcomes, lock = [], threading.Lock()

    def one():
        started = time.monotonic()
        try:
            d.client("acme").infer("slow", batch)
            result = "ok"
        except RtdError as e:
            result = e.code
        with lock:
            outcomes.append((result, time.monotonic() - started))
    threads = [threading.Thread(target=one) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    refused = [s for r, s in outcomes if r == Code.E_BUDGET_EXCEEDED]
    assert len(outcomes) == 12 and refused, outcomes
    assert sum(r == "ok" for r, _ in outcomes) + len(refused) == 12, outcomes
    assert sum(r == "ok" for r, _ in outcomes) >= 3
    assert Code.E_BUDGET_EXCEEDED.status == "RESOURCE_EXHAUSTED"
    assert d.client("beta").infer("mlp", {"X": np.ones((1, 4), np.float32)})["Y"].shape == (1, 3)
    assert d.client("acme").infer("slow", {"X": np.ones((1, 384), np.float32)})["Y"].shape == (1, 384)


SETPRIV = shutil.which("setpriv")


@pytest.mark.skipif(SETPRIV is None, reason="setpriv (util-linux) is not installed")
def test_the_units_capabilities_and_no_new_privs_are_enough(tmp_path):
    """Run rtd serve with exactly rtd.service's CapabilityBoundingSet and no_new_privs:
    workers still start confined, load and answer."""
    unit = open(os.path.join(os.path.dirname(__file__), "..", "..", "systemd", "rtd.service")).read()
    caps = re.search(r"^CapabilityBoundingSet=(.*)$", unit, re.M).group(1).split()
    bounding = "-all," + ",".join("+" + c.removeprefix("CAP_").lower() for c in caps)
    d = Daemon(tmp_path / "capped")
    d.prefix = [SETPRIV, "--bounding-set", bounding, "--inh-caps", "-all", "--no-new-privs"]
    # As systemd runs rtd.service (Delegate=): in a fresh cgroup of its own in every hierarchy,
    # which no earlier run can have prepared; the cgroup roots stay as the host has them.
    layout = detect_layout()
    roots = ([layout.v2_root] if layout.v2_root else []) + sorted(set(layout.v1_roots.values()))
    unit = [os.path.join(root, f"rtd-test-unit-{os.getpid()}") for root in roots]
    for path in unit:
        os.mkdir(path)

    def join_unit():
        for path in unit:
            with open(os.path.join(path, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
    d.preexec = join_unit
    d.start()
    try:
        d.client("acme").load("mlp", d.package("acme", mlp(1), "mlp"))
        assert d.client("acme").infer("mlp", {"X": np.ones((1, 4), np.float32)})["Y"].shape == (1, 3)
        with open(f"/proc/{d.proc.pid}/status") as f:
            bnd = int(re.search(r"^CapBnd:\s+([0-9a-f]+)$", f.read(), re.M).group(1), 16)
        assert bin(bnd).count("1") == len(caps)
        assert d.instances("acme", "mlp")[0]["layers"]["seccomp"].startswith("enforced")
        with open(f"/proc/{d.instances('acme', 'mlp')[0]['pid']}/cgroup") as f:
            assert f"/rtd-test-unit-{os.getpid()}/rtd/" in f.read()   # below the unit's cgroup, as under systemd
    finally:
        assert d.stop() == 0
        for path in unit:
            os.rmdir(path)


def test_a_tenant_cannot_hold_more_models_than_its_limit(fresh_daemon):
    d = fresh_daemon()
    for i in range(8):
        d.client("acme").load(f"m{i}", d.package("acme", mlp(i), f"m{i}"))
    with pytest.raises(RtdError) as e:
        d.client("acme").load("m8", d.package("acme", mlp(8), "m8"))
    assert e.value.code == Code.E_BUDGET_EXCEEDED and "max_models" in e.value.detail
    d.client("acme").load("m0", d.package("acme", mlp(9), "m0", counter=2))  # replacing one is fine
    d.client("beta").load("m8", d.package("beta", mlp(8), "m8"))              # the limit is per tenant


def test_a_weight_whose_panels_outgrow_the_tenants_memory_fails_its_load_alone(fresh_daemon):
    """The compile packs a product's weight into the GEMM's 16-column panels in the tenant's worker, at LOAD: a
    thin (3.75 M x 1) weight, 15 MiB in the package, takes 240 MiB packed. Past the tenant's 256 MiB that load fails as
    the tenant's memory, and the tenant's other model and the other tenant serve on as before."""
    d = fresh_daemon(memory_bytes=256 << 20)
    d.client("acme").load("mlp", d.package("acme", mlp(1), "mlp"))
    d.client("beta").load("mlp", d.package("beta", mlp(2), "mlp"))
    x = np.ones((1, 4), np.float32)
    before = {tenant: d.client(tenant).infer("mlp", {"X": x})["Y"] for tenant in ("acme", "beta")}
    k = 15 << 18
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["H"]), helper.make_node("Add", ["H", "B"], ["Y"])], "thin",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 1])],
        [numpy_helper.from_array(np.full((k, 1), 1e-3, np.float32), "W"), numpy_helper.from_array(np.zeros(1, np.float32), "B")])
    with pytest.raises(RtdError) as e:
        d.client("acme").load("thin", d.package("acme", _bytes(graph), "thin"))
    assert e.value.code == Code.E_RESOURCE_EXHAUSTED and "memory" in e.value.detail, e.value
    for tenant in ("acme", "beta"):
        np.testing.assert_array_equal(d.client(tenant).infer("mlp", {"X": x})["Y"], before[tenant])
    assert "thin" not in {m.name for m in d.client("acme").index()}
