"""run_confined for real as root: every layer applied to a forked child, checked from
inside (with seccomp off where introspection needs open()) and by its effects."""
import os
import signal
import time

import numpy as np
import pytest

from rtd.errors import Code, RtdError
from rtd.sandbox import ConfinedError, SandboxKilled, load_policy, run_confined
from rtd.sandbox.cgroup import detect_layout
from rtd.sandbox.confined import DEFAULT_IDENTITY

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="confinement needs root (namespaces, cgroups)"), pytest.mark.usefixtures("no_cgroup_leftovers")]
INTROSPECT = {"unsafe_disable_seccomp": True}


def numpy_workload(n):
    a = np.arange(n * n, dtype=np.float64).reshape(n, n) / (n * n)
    big = np.ones(256 << 17)                 # 256 MiB, touched
    return {"matmul": (a @ a.T).tolist(), "big": float(big.sum()), "pid": os.getpid(), "uid": os.getuid()}


def test_numpy_workload_matches_unconfined():
    out = run_confined(numpy_workload, 200)
    a = np.arange(200 * 200, dtype=np.float64).reshape(200, 200) / (200 * 200)
    np.testing.assert_allclose(np.array(out["matmul"]), a @ a.T, rtol=1e-12)
    assert out["big"] == 256 << 17
    assert out["pid"] == 1 and out["uid"] == DEFAULT_IDENTITY.uid


def test_blas_uses_threads_inside():
    def work():
        a = np.ones((600, 600))
        for _ in range(5):
            a = a @ a / 600
        return float(a[0, 0])
    # the matmul runs on OpenBLAS's pool: clone(CLONE_THREAD) must be allowed, fork must not
    assert run_confined(work) == pytest.approx(1.0)


def introspect():
    def read(path):
        with open(path) as f:
            return f.read()
    status = dict(line.split(":\t", 1) for line in read("/proc/self/status").splitlines() if ":\t" in line)
    return {"status": {k: v.strip() for k, v in status.items()}, "fds": sorted(os.listdir("/proc/self/fd")),
            "mounts": read("/proc/self/mounts").splitlines(), "root": sorted(os.listdir("/")),
            "net": [line.split(":")[0].strip() for line in read("/proc/net/dev").splitlines()[2:]],
            "pids": sorted(p for p in os.listdir("/proc") if p.isdigit()), "hostname": os.uname().nodename,
            "sid": os.getsid(0), "scratch": oct(os.stat("/scratch").st_mode & 0o7777), "cgroup": read("/proc/self/cgroup")}


def test_layers_in_force_seen_from_inside():
    seen = run_confined(introspect, policy=load_policy(INTROSPECT))
    st = seen["status"]
    assert st["CapEff"] == st["CapPrm"] == st["CapBnd"] == st["CapAmb"] == "0" * 16
    assert st["NoNewPrivs"] == "1"
    assert st["Uid"].split() == [str(DEFAULT_IDENTITY.uid)] * 4
    assert seen["pids"] == ["1"] and seen["sid"] == 1
    assert seen["net"] == ["lo"]
    assert seen["root"] == ["proc", "scratch", "usr"]
    assert seen["hostname"] == "rtd-worker"
    assert seen["scratch"] == "0o700"
    assert len(seen["fds"]) == 2          # the socket, plus the fd listdir itself holds open
    root = next(m for m in seen["mounts"] if m.split()[1] == "/")
    assert " ro," in f" {root.split()[3]},"
    usr = next(m for m in seen["mounts"] if m.split()[1] == "/usr").split()[3].split(",")
    assert {"ro", "nosuid", "nodev", "noexec"} <= set(usr)
    assert all(line.endswith(":/") for line in seen["cgroup"].splitlines())   # cgroup namespace


def test_seccomp_is_in_force_and_kills():
    with pytest.raises(SandboxKilled) as e:
        run_confined(os.kill, 1, 0)   # kill(2) is not on the allow-list
    assert e.value.signal == signal.SIGSYS and e.value.layer == "seccomp"


def test_lazy_open_fails_cleanly_under_seccomp():
    def read_passwd():
        with open("/usr/lib/os-release") as f:
            return f.read()
    with pytest.raises(ConfinedError) as e:
        run_confined(read_passwd)
    assert e.value.type_name == "PermissionError"


def test_errors_and_refusals_cross_as_data():
    def refuse():
        raise RtdError(Code.E_INPUT_INVALID, "bad shape")
    with pytest.raises(RtdError) as e:
        run_confined(refuse)
    assert e.value.code is Code.E_INPUT_INVALID and e.value.detail == "bad shape"
    with pytest.raises(ConfinedError):
        run_confined(lambda: object())   # not JSON-safe: refused, never pickled


def test_wall_clock_timeout_kills_the_tree():
    with pytest.raises(SandboxKilled) as e:
        run_confined(spin, 1e9, timeout=0.5)
    assert e.value.signal == signal.SIGKILL and "timeout" in e.value.reason


def test_rlimit_cpu_kills_with_sigxcpu():
    with pytest.raises(SandboxKilled) as e:
        run_confined(spin, 1e9, policy=load_policy({"limits": {"cpu_seconds": 1}}))
    assert e.value.signal in (signal.SIGXCPU, signal.SIGKILL) and e.value.layer == "cpu"   # pid 1 ignores SIGXCPU


def test_scratch_tmpfs_is_size_capped():
    def fill():
        chunk, written = b"x" * (1 << 20), 0
        with open("/scratch/f", "wb", buffering=0) as f:
            try:
                while True:
                    written += f.write(chunk)
            except OSError as e:
                return [e.errno, written]
    policy = load_policy({**INTROSPECT, "limits": {"scratch_bytes": 8 << 20, "fsize_bytes": 1 << 30}})
    err, written = run_confined(fill, policy=policy)
    assert err == 28 and written <= 8 << 20   # ENOSPC from tmpfs size=, not the file-size rlimit


def test_memory_limit_is_an_oom_kill():
    with pytest.raises(SandboxKilled) as e:
        run_confined(lambda: float(np.ones(256 << 17).sum()), policy=load_policy({"limits": {"memory_bytes": 64 << 20}}))
    assert e.value.signal == signal.SIGKILL and e.value.layer == "memory" and "oom_kill=1" in e.value.reason


def spin(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
    return True


def test_cpu_quota_throttles(monkeypatch):
    """The quota is written and the kernel's throttling counter moves while a busy worker runs."""
    layout = detect_layout()
    if layout.home("cpu") != "v1":
        pytest.skip(f"host drives cpu via {layout.home('cpu')}; this test reads the v1 cpu.stat")
    from rtd.sandbox import cgroup
    seen = {}
    real_remove = cgroup.WorkerCgroup.remove

    def remove_after_reading(self, timeout=2.0):
        with open(os.path.join(self.tenant_dirs["cpu"], "cpu.cfs_quota_us")) as f:
            seen["quota"] = int(f.read())
        with open(os.path.join(self.tenant_dirs["cpu"], "cpu.stat")) as f:
            seen["stat"] = dict(line.split() for line in f)
        real_remove(self, timeout)
    monkeypatch.setattr(cgroup.WorkerCgroup, "remove", remove_after_reading)   # observe, not replace
    assert run_confined(spin, 0.5, policy=load_policy({"limits": {"cpu_cores": 0.05}}))
    assert seen["quota"] == 5000
    assert int(seen["stat"]["nr_throttled"]) > 0


ABSENT_GPU = {"gpu_devices": [63], "gpu_memory_bytes": 1 << 20}   # no host has /dev/nvidia63: no GPU limit


def test_strict_refuses_a_missing_mandatory_layer():
    policy = load_policy({"mandatory": ["seccomp", "gpu"], "limits": ABSENT_GPU})
    with pytest.raises(RtdError) as e:
        run_confined(int, policy=policy)
    assert e.value.code is Code.E_LAYER_UNAVAILABLE and e.value.detail.startswith("gpu: ")


def test_non_strict_still_refuses_gpus_the_host_lacks():
    """strict decides about confinement layers; the GPUs a policy names are what the tenant's models
    run on, so a worker without them is refused either way, before any cgroup is made."""
    policy = load_policy({"mandatory": ["seccomp"], "strict": False, "limits": ABSENT_GPU})
    with pytest.raises(RtdError) as e:
        run_confined(int, "7", policy=policy)
    assert e.value.code is Code.E_LAYER_UNAVAILABLE and "/dev/nvidia" in e.value.detail


def test_without_userns_the_uid_switch_still_happens():
    seen = run_confined(introspect, policy=load_policy({**INTROSPECT, "disable_userns": True}))
    assert seen["status"]["Uid"].split() == [str(DEFAULT_IDENTITY.uid)] * 4
    assert seen["status"]["CapEff"] == "0" * 16 and seen["status"]["NoNewPrivs"] == "1"
