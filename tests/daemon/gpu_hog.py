"""Raw cudaMalloc past a tenant's GPU budget, in a real confined worker, against the real NVML
watcher: the zygote (preloading this module, so the worker finds its target) spawns one
worker of a GPU tenant, the supervisor's GpuWatch polices it at its 5 ms poll, and the
worker calls cupy.cuda.runtime.malloc, which bypasses CuPy's pool and its cap, chunk by
chunk until it is stopped or holds `ceiling` bytes (then it waits, holding them: a watcher
that works still kills it). What stops it: dmem.max where the kernel's dmem controller has
the GPU's region (the malloc fails: out of memory), else the watcher (SIGKILL, layer gpu).

Run in a fresh process, `python -m tests.daemon.gpu_hog BUDGET_BYTES` from the repository
root (it prints one JSON line), by tests/daemon/test_gpu_budget.py and bench/gpu_check.py
(e): the zygote must be forked from a process in which CUDA never initialised (no fork
survives it) and NVML must be the driver's, not the stand-in another test module loads."""
import json
import os
import socket
import sys
import time

from rtd import wire
from rtd.daemon.observe.gpu_watch import GpuWatch
from rtd.kernels import backend_cupy
from rtd.sandbox import TenantIdentity, Zygote, gpu_memory, load_policy
from rtd.sandbox.cgroup import detect_layout

TENANT = "gpuhog"
TARGET = "tests.daemon.gpu_hog:malloc_past_budget"
CHUNK = 64 << 20


def unavailable_reason() -> str | None:
    """Why the run cannot happen on this host, asked without initialising CUDA in the caller."""
    if backend_cupy.cupy is None:
        return backend_cupy._IMPORT_ERROR
    if not os.path.exists("/dev/nvidia0"):
        return "no /dev/nvidia0"
    if gpu_memory.nvml_library() is None:
        return "no libnvidia-ml: the NVML watcher cannot run"
    if os.geteuid() != 0:
        return "confined workers need root"
    return None


def malloc_past_budget(sock, chunk: int, ceiling: int) -> None:
    """The worker's target (its CUDA context was made by init_device before its filter):
    after "go", raw mallocs of `chunk` bytes, each reported as {"held": bytes}; a refusal is
    reported with the error, reaching `ceiling` with {"ceiling": true}; then it holds what it
    has until its socket closes."""
    cupy = backend_cupy.cupy
    reader = wire.Reader(sock)
    wire.send(sock, wire.Kind.OK, 0, {"hello": True})
    reader.recv()   # go
    held, pointers = 0, []
    while held < ceiling:
        try:
            pointers.append(cupy.cuda.runtime.malloc(chunk))
        except cupy.cuda.runtime.CUDARuntimeError as e:
            wire.send(sock, wire.Kind.OK, 0, {"held": held, "refused": str(e)})
            break
        held += chunk
        wire.send(sock, wire.Kind.OK, 0, {"held": held})
    else:
        wire.send(sock, wire.Kind.OK, 0, {"held": held, "ceiling": True})
    try:
        reader.recv()
    except EOFError:
        pass


def dmem_in_force(budget: int) -> bool:
    """Whether a worker of a tenant naming GPU 0 gets dmem.max (as sandbox/cgroup.py writes it)."""
    layout = detect_layout()
    return "dmem" in layout.v2_controllers and gpu_memory.plan((0,), budget, layout.v2_root, True).layer == "dmem"


def run(budget: int, chunk: int = CHUNK, ceiling: int | None = None, timeout: float = 30.0) -> dict:
    """One worker of tenant gpuhog (gpu_devices [0], gpu_memory_bytes `budget`) mallocs past
    its budget under the watcher; what stopped it, how much it held, and how fast."""
    ceiling = ceiling or 4 * budget
    result = {"budget": budget, "chunk": chunk, "ceiling": ceiling, "dmem": dmem_in_force(budget),
              "held": 0, "refused": None, "reached_ceiling": False, "kill": None, "status": None}
    zygote = Zygote.start(preload=(TARGET.partition(":")[0],), spares=False)   # before any thread
    watch, kills = None, []
    try:
        ours, theirs = socket.socketpair()
        policy = load_policy({"limits": {"gpu_devices": [0], "gpu_memory_bytes": budget}})
        handle = zygote.spawn(TARGET, policy=policy, identity=TenantIdentity(TENANT, 61040, 61040), sock=theirs,
                              args=(chunk, ceiling))
        theirs.close()
        ours.settimeout(timeout)
        reader = wire.Reader(ours)
        try:
            reader.recv()   # hello: CUDA is up in the worker
        except EOFError:
            status = handle.wait(10)
            raise RuntimeError(f"the worker ended before its first malloc: {status}") from None
        watch = GpuWatch.start({TENANT: budget}, lambda kill: kills.append((kill, time.monotonic())), lambda *_: None)
        result["gpus"] = [g.uuid for g in watch.gpus]
        watch.watch(TENANT, handle)
        started = time.monotonic()
        wire.send(ours, wire.Kind.OK, 0, {"go": True})
        try:
            while True:
                head = reader.recv().head
                result["held"] = max(result["held"], head["held"])
                if "refused" in head or head.get("ceiling"):
                    result["refused"], result["reached_ceiling"] = head.get("refused"), bool(head.get("ceiling"))
                    break
            if result["refused"]:
                ours.settimeout(1.0)   # refused within the budget (dmem.max): a kill by the watcher too comes by now
            reader.recv()   # the worker holds its memory until we close: EOF here is its end
        except (EOFError, TimeoutError):
            pass
        ours.close()
        status = handle.wait(10)
        ended = time.monotonic()
        if status is None:
            handle.kill()
            status = handle.wait(10)
        result["status"] = {"code": status.code, "signal": status.signal, "layer": status.layer, "reason": status.reason}
        result["malloc_to_exit_ms"] = round((ended - started) * 1000, 3)
        if kills:
            kill, at = kills[0]
            result["kill"] = {"pid": kill.pid, "tenant_bytes": kill.tenant_bytes, "worker_bytes": kill.worker_bytes,
                              "latency_ms": kill.latency_ms, "kill_to_exit_ms": round((ended - at) * 1000, 3),
                              "event": f"event=gpu_kill tenant={kill.tenant} pid={kill.pid} tenant_bytes={kill.tenant_bytes} "
                                       f"worker_bytes={kill.worker_bytes} budget_bytes={kill.budget_bytes} "
                                       f"latency_ms={kill.latency_ms}"}
    finally:
        if watch is not None:
            watch.stop()
        zygote.close()
    return result


def stopped(result: dict) -> str | None:
    """How the worker was stopped ("gpu": the watcher's kill, "dmem": its malloc refused within
    the budget), None when it was not."""
    status = result["status"] or {}
    if result["kill"] is not None and status.get("layer") == "gpu":
        return "gpu"
    if result["dmem"] and result["refused"] and "memory" in result["refused"].lower() and result["held"] <= result["budget"]:
        return "dmem"
    return None


if __name__ == "__main__":
    reason = unavailable_reason()
    print(json.dumps({"not_run": reason} if reason else run(int(sys.argv[1]))), flush=True)
