"""The NVML watcher against a stand-in NVML: a real shared library with NVML's C ABI
(nvml_standin.c, built here with gcc, loaded by nvidia-ml-py as libnvidia-ml.so.1) whose
GPUs and per-process usage come from a file the test writes. The processes it reports are
real: sleeping children, a confined worker from the zygote, the workers of a watcher run
inside a real pid namespace as a pod's daemon is (pod_watch.py under unshare), and the
workers of a real `rtd serve` with two tenants, one of them with a GPU budget. This host has
no GPU, so what a real driver would report (its pids in the host's numbering or the
caller's, no memory figure, MPS clients) is written by the test; everything downstream of
NVML is real."""
import asyncio
import ctypes
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as tc

from rtd import wire
from rtd.daemon.serving.channel import WorkerChannel
from rtd.daemon.observe.gpu_watch import GpuWatch, probe
from rtd.daemon.serving.instances import Ending, Instance
from rtd.errors import Code, RtdError
from rtd.sandbox import TenantIdentity, Zygote, load_policy
from tests.daemon.conftest import Daemon, mlp, slow_model
from tests.sandbox.sandbox_workers import start_echo

HERE = os.path.dirname(__file__)
UUID = "GPU-5ca1ab1e-0000-4000-8000-000000000000"


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    """The stand-in's directory (holding libnvidia-ml.so.1) and the state file it reads."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the stand-in NVML")
    root = tmp_path_factory.mktemp("nvml")
    library = root / "libnvidia-ml.so.1"
    subprocess.run(["gcc", "-O1", "-Wall", "-Werror", "-shared", "-fPIC", "-Wl,-soname,libnvidia-ml.so.1",
                    "-o", str(library), os.path.join(HERE, "nvml_standin.c")], check=True)
    state = root / "gpus.txt"
    write_state(state, {})
    return root, state


def write_state(path, procs: dict, fail: int | None = None, total: int = 80 << 30, mps: dict | None = None):
    """GPU 0 and its processes {pid: bytes, or "na" for no figure}; `fail`: the NVML error its
    process query returns; `mps`: MPS clients {pid: bytes}."""
    lines = [f"gpu 0 {UUID} {total} 37 71500"] + [f"proc 0 {pid} {used}" for pid, used in procs.items()]
    lines += [f"mps 0 {pid} {used}" for pid, used in (mps or {}).items()]
    if fail is not None:
        lines.append(f"fail 0 {fail}")
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)   # the stand-in rereads it at every call: never half written


@pytest.fixture
def in_process(standin, monkeypatch):
    """nvidia-ml-py in this process on the stand-in: loaded by path first, so pynvml's
    CDLL("libnvidia-ml.so.1") finds it by its soname."""
    root, state = standin
    write_state(state, {})   # no process an earlier test listed (a dead pid NVML still lists refuses the watch)
    ctypes.CDLL(str(root / "libnvidia-ml.so.1"))
    monkeypatch.setenv("RTD_NVML_STANDIN", str(state))
    return state


class Child:
    """A real process the watcher polices: what it asks of a handle (pid, alive, kill)."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        self.pid, self.killed_by = self.proc.pid, None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self, layer=None, reason=""):
        self.killed_by = (layer, reason)
        self.proc.send_signal(signal.SIGKILL)


def start_watch(budgets, kills, health):
    # an hour before the thread's first poll: the test polls, so it knows which poll saw what
    return GpuWatch.start(budgets, kills.append, lambda minor, error: health.append((minor, error)), poll_s=3600)


def test_the_poll_that_sees_a_tenant_over_budget_kills_its_largest_worker(in_process):
    a1, a2, b1 = Child(), Child(), Child()
    kills, health = [], []
    write_state(in_process, {a1.pid: 400, a2.pid: 500, b1.pid: 900})
    watch = start_watch({"acme": 1000, "beta": 1000}, kills, health)
    try:
        for tenant, child in (("acme", a1), ("acme", a2), ("beta", b1)):
            watch.watch(tenant, child)
        assert watch.poll(time.monotonic()) == [] and kills == []   # 900 and 900: within budget
        write_state(in_process, {a1.pid: 400, a2.pid: 700, b1.pid: 900})
        seen = watch.poll(time.monotonic())
        assert [(k.tenant, k.pid, k.tenant_bytes, k.worker_bytes, k.budget_bytes) for k in seen] == [
            ("acme", a2.pid, 1100, 700, 1000)]
        assert a2.proc.wait(10) == -signal.SIGKILL and seen[0].latency_ms >= 0 and kills == seen
        assert a2.killed_by[0] == "gpu" and "over its gpu_memory_bytes 1000" in a2.killed_by[1]
        assert watch.poll(time.monotonic()) == []   # the killed worker is gone: 400 is left, nobody else dies
        assert a1.alive() and b1.alive() and health == [] and watch.healthy((0,))
    finally:
        watch.stop()
        for child in (a1, a2, b1):
            child.proc.kill()
            child.proc.wait()


def test_an_nvml_error_makes_the_gpu_unhealthy_until_nvml_answers_again(in_process):
    kills, health = [], []
    write_state(in_process, {})
    watch = start_watch({"acme": 1000}, kills, health)
    try:
        assert watch.healthy((0,)) and not watch.healthy((1,))   # GPU 1 is not there at all
        write_state(in_process, {}, fail=15)   # NVML_ERROR_GPU_IS_LOST
        watch.poll(time.monotonic())
        assert not watch.healthy((0,)) and health == [(0, "GPU is lost")]
        write_state(in_process, {})
        watch.poll(time.monotonic())
        assert watch.healthy((0,)) and health == [(0, "GPU is lost"), (0, None)]
    finally:
        watch.stop()


def test_gauges_are_read_as_triton_exports_them(in_process):
    other = Child()   # another program on the GPU: in the gauges, nobody's budget
    write_state(in_process, {other.pid: 3 << 30}, total=80 << 30)
    watch = start_watch({"acme": 1000}, [], [])
    try:
        watch.poll(0.0)   # a poll reads the gauges when they are due: the first one is
        (reading,) = watch.readings()
        assert (reading.uuid, reading.utilization, reading.memory_used_bytes, reading.memory_total_bytes,
                reading.power_watts) == (UUID, 0.37, 3 << 30, 80 << 30, 71.5)
        assert watch.healthy((0,)) and other.alive()
    finally:
        watch.stop()
        other.proc.kill()
        other.proc.wait()


# -- attribution: never a silent zero -------------------------------------------------------

@pytest.mark.parametrize("listed,why", [
    ({"na": "na"}, "NVML gives no memory figure for pid {pid} on GPU 0 (usedGpuMemory not available"),
    ({"gone": 5 << 20}, "NVML lists pid {pid} (5242880 bytes) on GPU 0, which is no process rtd's pid namespace can see"),
    ({"mps": 5 << 20}, "NVIDIA MPS serves 1 client(s) on GPU 0"),
], ids=["no_figure", "unseen_pid", "mps"])
def test_the_watcher_refuses_to_start_when_it_cannot_attribute_gpu_memory(in_process, listed, why):
    kind, used = next(iter(listed.items()))
    child = Child()
    pid = child.pid if kind == "na" else 2**22 + 17 if kind == "gone" else child.pid   # above pid_max: no process
    write_state(in_process, {} if kind == "mps" else {pid: used}, mps={pid: used} if kind == "mps" else None)
    try:
        with pytest.raises(RtdError) as e:
            start_watch({"acme": 1 << 30}, [], [])
        assert e.value.code is Code.E_GPU_UNATTRIBUTED and why.format(pid=pid) in e.value.detail, e.value.detail
        assert probe().startswith("cannot attribute GPU memory: ") and why.format(pid=pid) in probe()
    finally:
        child.proc.kill()
        child.proc.wait()


def test_a_gpu_that_becomes_blind_is_unhealthy_until_it_clears_and_what_is_attributed_still_counts(in_process):
    mine, kills, health = Child(), [], []
    write_state(in_process, {})
    watch = start_watch({"acme": 1 << 20}, kills, health)
    try:
        watch.watch("acme", mine)
        write_state(in_process, {2**22 + 17: 4 << 20, mine.pid: 1 << 19})   # a pid nobody here sees, and ours
        assert watch.poll(time.monotonic()) == []   # 512 KiB is ours and within budget; the rest is nobody's we know
        assert not watch.healthy((0,)) and f"NVML lists pid {2**22 + 17}" in watch.blind()[0]
        assert health == [(0, f"cannot attribute GPU memory: {watch.blind()[0]}")]
        write_state(in_process, {2**22 + 17: 4 << 20, mine.pid: 2 << 20})
        (kill,) = watch.poll(time.monotonic())   # blind, and yet what it can attribute is over budget
        assert kill.pid == mine.pid and mine.proc.wait(10) == -signal.SIGKILL
        write_state(in_process, {})
        watch.poll(time.monotonic())
        assert watch.healthy((0,)) and watch.blind() == {} and health[-1] == (0, None)
    finally:
        watch.stop()
        mine.proc.kill()
        mine.proc.wait()


def test_a_worker_nvml_does_not_list_makes_its_gpus_blind_after_the_grace(in_process):
    from rtd.daemon.observe.gpu_watch import UNLISTED_GRACE_S
    unlisted, health = Child(), []
    write_state(in_process, {})
    watch = start_watch({"acme": 1 << 30}, [], health)
    try:
        watch.watch("acme", unlisted)
        now = time.monotonic()
        watch.poll(now)
        assert watch.healthy((0,))   # just handed over: NVML may not list its context yet
        watch.poll(now + UNLISTED_GRACE_S + 1)
        assert not watch.healthy((0,)) and f"worker pid {unlisted.pid} of tenant acme" in watch.blind()[0]
        write_state(in_process, {unlisted.pid: 300 << 20})
        watch.poll(now + UNLISTED_GRACE_S + 2)
        assert watch.healthy((0,)) and unlisted.alive()
    finally:
        watch.stop()
        unlisted.proc.kill()
        unlisted.proc.wait()


class Pod:
    """pod_watch.py as PID 1 of a new pid namespace (as a pod's daemon), on the stand-in NVML:
    `own_proc` mounts the namespace's own /proc (a pod), else it sees the host's."""

    def __init__(self, standin, own_proc: bool):
        root, state = standin
        env = dict(os.environ, LD_LIBRARY_PATH=str(root), RTD_NVML_STANDIN=str(state),
                   PYTHONPATH=os.path.dirname(os.path.dirname(HERE)))
        command = ["unshare", "--pid", "--fork"] + (["--mount-proc"] if own_proc else []) + [
            sys.executable, os.path.join(HERE, "pod_watch.py")]
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.pids = self.read()["pids"]   # as the pod numbers them
        self.host_pids = self._host_pids()

    def _host_pids(self) -> list[int]:
        """The workers' host pids: the processes of the pod's namespace whose NSpid ends with them."""
        namespace = os.readlink(f"/proc/{self.proc.pid}/ns/pid_for_children")
        found = {}
        for entry in os.listdir("/proc"):
            try:
                if entry.isdigit() and os.readlink(f"/proc/{entry}/ns/pid") == namespace:
                    with open(f"/proc/{entry}/status") as f:
                        nspid = next(line.split()[1:] for line in f if line.startswith("NSpid:"))
                    found[int(nspid[-1])] = int(entry)
            except (FileNotFoundError, ProcessLookupError, PermissionError):   # gone, or not ours to read
                continue
        return [found[p] for p in self.pids]

    def ask(self, command: str) -> dict:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.read()

    def read(self) -> dict:
        line = self.proc.stdout.readline()
        assert line, f"pod_watch.py ended (exit {self.proc.wait(10)})"
        return json.loads(line)

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(30)


@pytest.fixture
def pod(standin):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a new pid namespace needs root and util-linux's unshare")
    pods = []

    def make(own_proc: bool) -> Pod:
        pods.append(Pod(standin, own_proc))
        return pods[-1]
    yield make
    for p in pods:
        p.close()


def test_in_a_pod_a_driver_that_reports_the_pods_pids_is_matched_directly(standin, pod):
    p = pod(own_proc=True)
    assert p.pids != p.host_pids   # the pod's numbering is not the host's
    write_state(standin[1], {})
    assert p.ask("start 1048576") == {"started": True}
    write_state(standin[1], {p.pids[0]: 1 << 19, p.pids[1]: 1 << 20})   # a translating driver: the pod's numbers
    got = p.ask("poll")
    assert got["kills"] == [p.pids[1]] and got["alive"] == [True, False] and got["blind"] == {}


def test_in_a_pod_a_driver_that_reports_host_pids_is_refused_never_read_as_zero(standin, pod):
    p = pod(own_proc=True)
    write_state(standin[1], {h: 1 << 20 for h in p.host_pids})   # the host's numbers, which the pod cannot see
    refused = p.ask("start 1048576")
    assert refused["refused"] == "E_GPU_UNATTRIBUTED" and f"NVML lists pid {p.host_pids[0]}" in refused["detail"]
    write_state(standin[1], {})
    assert p.ask("start 1048576") == {"started": True}   # an idle GPU: nothing to attribute yet
    write_state(standin[1], {h: 4 << 20 for h in p.host_pids})   # the workers' memory appears, under host pids
    got = p.ask("poll")
    assert got["kills"] == [] and got["alive"] == [True, True]
    assert "which is no process rtd's pid namespace can see" in got["blind"]["0"]
    assert got["health"][-1][1].startswith("cannot attribute GPU memory: NVML lists pid")


def test_in_a_container_sharing_the_hosts_proc_host_pids_are_matched_through_nspid(standin, pod):
    p = pod(own_proc=False)
    write_state(standin[1], {})
    assert p.ask("start 1048576") == {"started": True}
    write_state(standin[1], {p.host_pids[0]: 1 << 19, p.host_pids[1]: 1 << 20})   # host pids, seen in the host's /proc
    got = p.ask("poll")
    assert got["kills"] == [p.pids[1]] and got["alive"] == [True, False] and got["blind"] == {}


def test_in_a_container_sharing_the_hosts_proc_a_process_outside_its_namespace_is_not_taken_for_its_own(standin, pod):
    """A host process whose pid the pod's /proc shows, but that lives in no namespace of the pod's,
    is nobody's the watcher can tell (NSpid alone would not say so where namespaces are siblings)."""
    outside = Child()
    try:
        p = pod(own_proc=False)
        write_state(standin[1], {})
        assert p.ask("start 1048576") == {"started": True}
        write_state(standin[1], {outside.pid: 4 << 20})
        got = p.ask("poll")
        assert got["kills"] == [] and f"NVML lists pid {outside.pid}" in got["blind"]["0"] and outside.alive()
    finally:
        outside.proc.kill()
        outside.proc.wait()


def test_doctor_probe_lists_the_gpus_nvml_sees_and_their_mig_mode(in_process):
    write_state(in_process, {})
    assert probe() == (f"initialises: /dev/nvidia0 {UUID} no MIG (every process NVML lists is one this pid namespace sees; "
                       "the watcher polls every 5 ms)")


def test_without_nvml_the_watcher_refuses_to_start(monkeypatch):
    # no library (NVML_ERROR_LIBRARY_NOT_FOUND), or the stand-in loaded by an earlier test
    # with no state to read, failing nvmlInit as a library without its driver does
    monkeypatch.delenv("RTD_NVML_STANDIN", raising=False)
    with pytest.raises(RtdError) as e:
        GpuWatch.start({"acme": 1}, print, print)
    assert e.value.code == Code.E_LAYER_UNAVAILABLE and e.value.detail.startswith("NVML: ")
    assert probe().startswith("unavailable: NVML: ")


@pytest.mark.skipif(os.geteuid() != 0, reason="confined workers need root")
def test_a_confined_worker_killed_by_the_watcher_ends_as_a_gpu_resource_kill(in_process):
    """The zygote's exit report names layer gpu, and an Instance whose worker it was tells
    a request in flight E_RESOURCE_EXHAUSTED naming limits.gpu_memory_bytes and its value, and
    ends as a resource kill, not a crash."""
    zygote = Zygote.start(preload=("rtd.sandbox.echo",), spares=False)
    watch = None
    try:
        handle, ours = start_echo(zygote, TenantIdentity("gpuwatch", 61020, 61020))
        watch = start_watch({"gpuwatch": 1 << 20}, [], [])
        watch.watch("gpuwatch", handle)

        async def serve_until_killed():
            ended = []
            instance = Instance(0, ended.append, dataclasses.replace(load_policy().limits, gpu_memory_bytes=1 << 20))
            instance.handle, instance.channel = handle, WorkerChannel(ours, instance._lost)
            assert (await instance.send(wire.Kind.INFER, {"n": 1}, {}, 60, lambda _: None)).head == {"n": 1}
            write_state(in_process, {handle.pid: 2 << 20})
            await asyncio.get_running_loop().run_in_executor(None, watch.poll, time.monotonic())
            return instance, await instance.failure(), ended   # what a request in flight is told
        instance, failure, ended = asyncio.run(serve_until_killed())
        status = handle.wait(10)
        assert (status.signal, status.layer) == (signal.SIGKILL, "gpu") and "gpu_memory_bytes 1048576" in status.reason
        assert instance.ending == Ending.RESOURCE and ended == [instance]
        assert failure.code == Code.E_RESOURCE_EXHAUSTED and failure.detail.startswith("gpu:"), failure
        assert "limits.gpu_memory_bytes 1048576" in failure.detail and "raise it in the tenant's policy" in failure.detail
    finally:
        if watch is not None:
            watch.stop()
        zygote.close()


# -- a real rtd serve ------------------------------------------------------------------------

@pytest.fixture
def gpu_daemon(tmp_path, standin, monkeypatch):
    """rtd serve with tenants acme (GPU 0, a budget of 1 MiB) and beta (no GPU), its NVML the stand-in."""
    root, state = standin
    write_state(state, {})
    monkeypatch.setenv("LD_LIBRARY_PATH", str(root))
    monkeypatch.setenv("RTD_NVML_STANDIN", str(state))
    d = Daemon(tmp_path, policies={"acme": {"gpu_devices": [0], "gpu_memory_bytes": 1048576}})
    d.start()
    yield d, state
    assert d.stop() == 0


def load_or_skip(d, tenant, model, name):
    try:
        d.client(tenant).load(name, d.package(tenant, model, name))
    except RtdError as e:
        if tenant == "acme" and e.code in (Code.E_CONTAINMENT, Code.E_LAYER_UNAVAILABLE):
            pytest.skip(f"the GPU tenant's worker cannot start on this host (no GPU): {e}")
        raise


def wait_for(predicate, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"not seen within {timeout} s: {what}")


def test_daemon_kills_the_worker_over_its_gpu_budget_and_the_other_tenant_keeps_its_results(gpu_daemon):
    d, state = gpu_daemon
    load_or_skip(d, "acme", slow_model(layers=24, width=512), "slow")
    load_or_skip(d, "beta", mlp(), "mlp")
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    before = d.client("beta").infer("mlp", {"X": x})["Y"]
    beta_pids = d.pids("beta")
    assert "event=gpu_watch" in d.read_log() and "tenants=acme" in d.read_log()
    (pid,) = d.pids("acme").values()
    outcome = {}

    def long_request():
        try:
            d.client("acme").infer("slow", {"X": np.ones((2048, 512), np.float32)}, timeout=120)
            outcome["result"] = "answered"
        except RtdError as e:
            outcome["result"] = e
    request = threading.Thread(target=long_request)
    request.start()
    wait_for(lambda: d.tenant("acme")["in_workers"] == 1, "acme's request in its worker")
    write_state(state, {pid: 2 << 20})   # what NVML would say of a worker holding 2 MiB
    request.join(120)
    killed = re.search(rf"event=gpu_kill tenant=acme pid={pid} tenant_bytes=2097152 worker_bytes=2097152 "
                       r"budget_bytes=1048576 latency_ms=([0-9.]+)", d.read_log())
    assert killed, d.read_log()[-2000:]
    error = outcome["result"]
    assert isinstance(error, RtdError) and error.code == Code.E_RESOURCE_EXHAUSTED and error.detail.startswith("gpu:"), error
    assert "limits.gpu_memory_bytes 1048576" in error.detail, error
    wait_for(lambda: d.metric('rtd_instance_ends_total{ending="resource",model="slow",tenant="acme"}') == 1,
             "the kill counted as a resource kill")
    assert "event=resource_kill tenant=acme model=slow" in d.read_log()
    assert d.metric('rtd_instance_ends_total{ending="crashed"') == 0
    d.wait_ready("acme", "slow")   # restarted: a new pid, which NVML does not list
    assert d.pids("beta") == beta_pids
    np.testing.assert_array_equal(d.client("beta").infer("mlp", {"X": x})["Y"], before)


def test_daemon_exports_tritons_gpu_gauges_and_gpu_health_feeds_readiness(gpu_daemon):
    d, state = gpu_daemon
    load_or_skip(d, "acme", mlp(), "mlp")
    load_or_skip(d, "beta", mlp(), "mlp")
    other = Child()   # another program on the GPU, which the daemon sees: counted by no tenant
    write_state(state, {other.pid: 3 << 30, **{pid: 1 << 20 for pid in d.pids("acme").values()}})
    wait_for(lambda: f'nv_gpu_memory_used_bytes{{gpu_uuid="{UUID}"}} 3221225472' in d.scrape(), "the gauges read")
    text = d.scrape()
    for family, help_text, value in (
            ("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)", "0.37"),
            ("nv_gpu_memory_total_bytes", "GPU total memory, in bytes", str(80 << 30)),
            ("nv_gpu_memory_used_bytes", "GPU used memory, in bytes", str(3 << 30)),
            ("nv_gpu_power_usage", "GPU power usage in watts", "71.5")):
        assert f"# HELP {family} {help_text}\n# TYPE {family} gauge\n{family}{{gpu_uuid=\"{UUID}\"}} {value}\n" in text
    client = tc.InferenceServerClient(f"unix:{d.socket}")

    def ready(tenant):
        return client.is_model_ready("mlp", headers={"authorization": f"Bearer {d.tokens[tenant]}"})
    assert ready("acme") and ready("beta")
    write_state(state, {}, fail=15)   # NVML_ERROR_GPU_IS_LOST on GPU 0
    wait_for(lambda: not ready("acme"), "acme's GPU model not ready")
    assert ready("beta") and "event=gpu_health gpu=0" in d.read_log()
    write_state(state, {other.pid: 3 << 30, **{pid: 1 << 20 for pid in d.pids("acme").values()}})
    wait_for(lambda: ready("acme"), "acme's model ready again")
    write_state(state, {other.pid: 3 << 30, 2**22 + 17: 1 << 20})   # a pid nobody here sees: blind, so not ready
    wait_for(lambda: not ready("acme"), "acme's model not ready while its GPU's memory is unattributed")
    assert "cannot attribute GPU memory" in d.read_log() and ready("beta")
    other.proc.kill()
    other.proc.wait()


def test_a_daemon_whose_nvml_lists_pids_it_cannot_see_refuses_its_watcher_and_says_why(tmp_path, standin, monkeypatch):
    root, state = standin
    write_state(state, {2**22 + 17: 1 << 30})   # host pids, as a non-translating driver gives them to a pod
    monkeypatch.setenv("LD_LIBRARY_PATH", str(root))
    monkeypatch.setenv("RTD_NVML_STANDIN", str(state))
    d = Daemon(tmp_path, policies={"acme": {"gpu_devices": [0], "gpu_memory_bytes": 1048576}}).start()
    try:
        log = d.read_log()
        assert "event=gpu_watch_refused" in log and "code=E_GPU_UNATTRIBUTED" in log and f"NVML lists pid {2**22 + 17}" in log
        assert "event=gpu_watch " not in log and "nv_gpu_" not in d.scrape()
    finally:
        assert d.stop() == 0


def test_a_daemon_without_a_gpu_tenant_exports_no_gpu_gauges(tmp_path):
    d = Daemon(tmp_path).start()
    try:
        assert "nv_gpu_" not in d.scrape() and "event=gpu_watch" not in d.read_log()
    finally:
        assert d.stop() == 0


def test_a_gpu_tenant_without_nvml_is_served_unwatched_and_the_log_says_so(tmp_path, monkeypatch):
    monkeypatch.delenv("RTD_NVML_STANDIN", raising=False)
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    d = Daemon(tmp_path)
    with open(d.config) as f:
        text = f.read()
    with open(d.config, "w") as f:
        f.write(text.replace("policy = { limits = { memory_bytes = 536870912 } }",
                             "policy = { limits = { memory_bytes = 536870912, gpu_devices = [0], "
                             "gpu_memory_bytes = 1048576 } }", 1))
    d.start()
    try:
        if os.path.exists("/dev/nvidia0"):
            pytest.skip("this host has a GPU: NVML may well initialise")
        assert "event=gpu_watch_unavailable" in d.read_log() and "nv_gpu_" not in d.scrape()
    finally:
        assert d.stop() == 0

