"""Durable state against a real `rtd serve` with two tenants: loads and unloads racing
between tenants keep the registry consistent, what a client was told succeeded survives a
restart or a kill -9 and what failed left no trace, a full disk is RESOURCE_EXHAUSTED and
changes nothing, and a damaged state directory costs only what is damaged."""
import concurrent.futures
import os
import random
import signal
import subprocess
import threading

import numpy as np
import pytest

from rtd.errors import Code, RtdError
from tests.daemon.conftest import mlp
from tests.daemon.test_serving import reference

X = np.array([[1, 2, 3, 4], [0.5, -1, 2, 0]], np.float32)


def registry(d) -> dict:
    return d.registry()


def consistent(d) -> None:
    """Every blob the registry names exists; no blob is unreferenced; no temporary is left."""
    blobs = os.path.join(d.state, "blobs")
    named = {digest for models in registry(d).values() for e in models.values() for digest in e["files"].values()}
    present = set(os.listdir(blobs))
    assert named <= present, f"registry names missing blobs: {named - present}"
    assert not [p for p in present if p.startswith(".")]


def serves(d, tenant: str, name: str, seed: int) -> None:
    np.testing.assert_allclose(d.client(tenant).infer(name, {"X": X})["Y"], reference(mlp(seed), {"X": X})["Y"],
                               rtol=1e-5, atol=1e-6)


def race(d, rounds: int, kill_after: float | None = None) -> dict:
    """Both tenants load and unload models at once; returns {(tenant, name): seed} of what
    the daemon acknowledged as loaded and not since acknowledged as unloaded (a model whose
    operation was cut short by a kill may be either way, and is left out)."""
    held, lock = {}, threading.Lock()

    def churn(tenant: str, offset: int):
        client, rng = d.client(tenant), random.Random(offset)
        for i in range(rounds):
            name, seed = f"m{rng.randrange(4)}", offset + i
            try:
                if rng.random() < 0.6:
                    client.load(name, d.package(tenant, mlp(seed), name, counter=i + 1))
                    with lock:
                        held[(tenant, name)] = seed
                else:
                    client.unload(name)
                    with lock:
                        held.pop((tenant, name), None)
            except RtdError as e:
                if e.code in (Code.E_INTERNAL, Code.E_DAEMON_UNREACHABLE) and kill_after is not None:   # killed meanwhile
                    with lock:
                        held.pop((tenant, name), None)
                    return
                if e.code != Code.E_MODEL_NOT_FOUND:
                    raise
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(churn, "acme", 0), pool.submit(churn, "beta", 1000)]
        if kill_after is not None:
            threading.Timer(kill_after, d.proc.kill).start()
        for f in futures:
            f.result()
    return held


def test_racing_loads_and_unloads_of_two_tenants_keep_the_registry_consistent(fresh_daemon):
    d = fresh_daemon()
    held = race(d, rounds=24)
    consistent(d)
    assert d.stop() == 0
    d.start()
    for (tenant, name), seed in held.items():
        serves(d, tenant, name, seed)
    assert {(t, n) for t, models in registry(d).items() for n in models} == set(held)


@pytest.mark.parametrize("kill_after", [0.7, 1.6, 2.5])
def test_kill_9_in_the_middle_of_loads_loses_nothing_acknowledged(fresh_daemon, kill_after):
    d = fresh_daemon()
    held = race(d, rounds=40, kill_after=kill_after)
    d.proc.wait(30)
    d.start()
    consistent(d)
    for (tenant, name), seed in held.items():
        serves(d, tenant, name, seed)
    status = d.status()
    assert status["damaged"] == [] and status["ready"]


@pytest.fixture
def small_state(tmp_path):
    """A state directory on a 24 MiB tmpfs, so the disk can be filled."""
    state = tmp_path / "small" / "state"
    state.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m,mode=0700", "tmpfs", str(state)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for a full disk: {mounted.stderr.strip()}")
    yield tmp_path / "small"
    subprocess.run(["umount", "-l", str(state)], check=False)


def fill(path: str) -> str:
    """Fill the filesystem holding `path` completely; returns the filler file."""
    filler = os.path.join(path, "filler")
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * (1 << 16))
                f.flush()
        except OSError:
            pass
    return filler


def test_a_full_disk_refuses_loads_and_unloads_and_changes_nothing(fresh_daemon, small_state):
    from tests.daemon.conftest import Daemon
    d = Daemon(small_state).start()
    try:
        d.client("acme").load("m", d.package("acme", mlp(1), "m"))
        d.client("beta").load("m", d.package("beta", mlp(2), "m"))
        before = open(d.state_file("acme", "registry.json"), "rb").read()
        marks = open(d.state_file("acme", "rollback.json"), "rb").read()
        filler = fill(d.state)
        big = mlp(3)
        with pytest.raises(RtdError) as e:
            d.client("acme").load("n", d.package("acme", big, "n"))
        assert e.value.code == Code.E_STORAGE_FULL and e.value.code.status == "RESOURCE_EXHAUSTED"
        with pytest.raises(RtdError) as e:
            d.client("acme").unload("m")
        assert e.value.code == Code.E_STORAGE_FULL
        assert [m.name for m in d.client("acme").index()] == ["m"]     # neither the load nor the unload happened
        serves(d, "acme", "m", 1)
        serves(d, "beta", "m", 2)
        assert open(d.state_file("acme", "registry.json"), "rb").read() == before
        assert open(d.state_file("acme", "rollback.json"), "rb").read() == marks
        assert d.stop() == 0
        os.unlink(filler)
        d.start()
        serves(d, "acme", "m", 1)
        d.client("acme").load("n", d.package("acme", big, "n"))        # what failed left no trace: not a rollback
        d.client("acme").unload("m")
        assert d.stop() == 0
        d.start()
        assert [m.name for m in d.client("acme").index()] == ["n"]
        consistent(d)
    finally:
        d.stop()


def test_an_upload_may_not_spool_into_the_registrys_reserve(small_state):
    """With room on the disk for the package but not for it and the registry's reserve (a quarter
    of the disk), the load is refused saying so, and the registry can still write (an unload)."""
    from tests.daemon.conftest import Daemon
    d = Daemon(small_state).start()
    try:
        d.client("acme").load("m", d.package("acme", mlp(1), "m"))
        filler = fill(d.state)
        disk = os.statvfs(d.state)
        reserve = disk.f_blocks * disk.f_frsize // 4
        os.truncate(filler, os.path.getsize(filler) - reserve - (1 << 20))   # the reserve and 1 MiB free
        package = d.package("acme", mlp(2, inner=1 << 17), "big")   # 2 MiB of weights
        with pytest.raises(RtdError) as e:
            d.client("acme").load("big", package)
        assert e.value.code == Code.E_STORAGE_FULL and "kept for the registry's writes" in e.value.detail
        free = os.statvfs(d.state)
        assert free.f_bavail * free.f_frsize > 2 << 20, "the disk had room for the package itself"
        d.client("acme").unload("m")
        assert [m.name for m in d.client("acme").index()] == []
    finally:
        d.stop()


def test_a_damaged_state_directory_costs_only_what_is_damaged(fresh_daemon):
    d = fresh_daemon()
    d.client("acme").load("a", d.package("acme", mlp(1), "a"))
    d.client("acme").load("b", d.package("acme", mlp(2), "b", counter=3))
    d.client("beta").load("c", d.package("beta", mlp(3), "c"))
    assert d.stop() == 0
    state = registry(d)
    os.unlink(os.path.join(d.state, "blobs", state["acme"]["b"]["files"]["3/model.onnx"]))
    torn = os.path.join(d.state, "blobs", ".0123456789ab.k2j4h5g6")     # a write killed before its rename
    open(torn, "wb").write(b"half")
    d.start()
    serves(d, "acme", "a", 1)
    serves(d, "beta", "c", 3)
    assert [m.name for m in d.client("acme").index()] == ["a"]
    assert any("acme/b" in line for line in d.status()["damaged"]) and not os.path.exists(torn)
    for garbage in (b"", b"{\x00garbage"):
        assert d.stop() == 0
        open(d.state_file("acme", "registry.json"), "wb").write(garbage)
        open(d.state_file("beta", "registry.json"), "wb").write(garbage)
        d.start()
        serves(d, "acme", "a", 1)
        serves(d, "beta", "c", 3)
        assert any("restored the last good registry" in line for line in d.status()["damaged"])
    assert d.stop() == 0
    for copy in ("rollback.json", "rollback.json.last-good"):
        with open(d.state_file("beta", copy), "w") as f:
            f.write("{}")                                               # replay protection reset on disk, both copies
    d.start()
    with pytest.raises(RtdError) as e:
        d.client("beta").load("c", d.package("beta", mlp(9), "c", counter=1))   # an older copy of c, replayed
    assert e.value.code == Code.E_ROLLBACK


def test_sigterm_drains_requests_in_flight(fresh_daemon):
    from tests.daemon.conftest import slow_model
    d = fresh_daemon()
    d.client("acme").load("slow", d.package("acme", slow_model(), "slow"))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        running = pool.submit(d.client("acme").infer, "slow", {"X": np.ones((3000, 384), np.float32)}, None, 60)
        while not any(i["in_flight"] for i in d.instances("acme", "slow")):
            pass
        d.proc.send_signal(signal.SIGTERM)
        assert running.result()["Y"].shape == (3000, 384)
    assert d.proc.wait(30) == 0
    assert "event=stopping" in d.read_log()
