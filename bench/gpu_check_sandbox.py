"""The GPU check's confinement rows (bench/gpu_check.sh; gpu_check.py dispatches here): each is a
`| check | result |` row of the dated table, "not run: <why>" where the host cannot.

    calls     (a) every call CUDA makes once started (strace, from a marker after init_device) sorted by
              what the compiled GPU filter answers it (bench/filter_eval.py): allowed, learned, killed
    confined  (b) CUDA inside the real worker root under the enforcing GPU filter: a transformer block
              compiled and run, (c) the device it got against NVML's UUID of the granted GPU, (d) its
              CUDA graph captured, and (a') the same under unsafe_gpu_audit: what the filter named or
              the kernel logged (dmesg type=1326)
    watch     (e) the NVML watcher run as a pod's daemon runs it (a new pid namespace and /proc), a CUDA
              process over the budget: its pid matched and killed (poll to kill), or why not

CUDA must never have started in this process before a confined worker forks: nothing here asks
CuPy for a device; the worker does."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # tests.*, bench.*

from bench.filter_eval import verdict  # noqa: E402  (after the path line above)
from rtd.errors import RtdError  # noqa: E402
from rtd.sandbox import SandboxKilled, gpu, load_policy, run_confined, seccomp, sigsys  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUDGET = 1 << 30
ARMED = "/rtd-gpu-check-armed"   # a path the traced process stats once CUDA has started: the filter's place
TRACED = f"""
import os, numpy as np
from rtd.kernels import backend_cupy, compile_model
from tests.kernels.kernel_graphs import transformer_block
backend_cupy.init_device((0,), {BUDGET})
try:
    os.stat({ARMED!r})
except OSError:
    pass
model = compile_model(transformer_block(), device="cuda")
for _ in range(3):
    model.run({{"x": np.ones((2, 4, 8), np.float32)}})
"""
POD = f"""
import json, subprocess, sys, time
from rtd.daemon.observe.gpu_watch import GpuWatch
from rtd.errors import RtdError
kills = []
class Hog:
    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", "import cupy, time; cupy.cuda.runtime.malloc({2 * BUDGET}); "
                                      "print('held', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
        self.pid = self.proc.pid
    def alive(self):
        return self.proc.poll() is None
    def kill(self, layer=None, reason=""):
        self.proc.kill()
try:
    watch = GpuWatch.start({{"pod": {BUDGET}}}, kills.append, lambda minor, error: None)
except RtdError as e:
    print(json.dumps({{"refused": e.code.name, "detail": e.detail}}))
    sys.exit(0)
hog = Hog()
hog.proc.stdout.readline()
watch.watch("pod", hog)
deadline = time.monotonic() + 10
while hog.alive() and time.monotonic() < deadline:
    time.sleep(0.01)
print(json.dumps({{"pod_pid": hog.pid, "killed": not hog.alive(), "latency_ms": [k.latency_ms for k in kills],
                  "blind": watch.blind()}}))
hog.proc.kill()
watch.stop()
"""


def row(out: str, check: str, result: str) -> None:
    line = f"| {check} | {result.replace('|', '/')} |"
    with open(out, "a") as f:
        f.write(line + "\n")
    print(line, flush=True)


def unavailable() -> str | None:
    """Why this host cannot run the confinement rows (without starting CUDA here)."""
    try:
        import cupy  # noqa: F401
    except ImportError:
        return "no GPU: cupy not installed"
    try:
        gpu.device_nodes((0,))
    except RtdError as e:
        return f"no GPU: {e.detail}"
    if os.geteuid() != 0:
        return "not root: confined workers need namespaces, cgroups and other uids"
    return None


def _arguments(text: str) -> tuple[int, ...]:
    """strace's top-level arguments of one call (`text` after its opening parenthesis) as the
    filter sees them: numbers as written (-X raw), NULL 0, anything else (a string, a struct) 0."""
    args, depth, quoted, current = [], 0, False, ""
    for i, ch in enumerate(text):
        if quoted:
            quoted = ch != '"' or text[i - 1] == "\\"
        elif ch == '"':
            quoted = True
        elif ch in "([{":
            depth += 1
        elif ch in ")]}" and depth:
            depth -= 1
        elif ch in ",)" and depth == 0:
            args.append(current.strip())
            current = ""
            if ch == ")":
                break
            continue
        current += ch
    return tuple(int(a, 16) if re.fullmatch(r"0x[0-9a-f]+", a) else int(a) if re.fullmatch(r"-?\d+", a) else 0
                 for a in args)


def _strace_calls(log: str) -> list[tuple[str, tuple]]:
    """(call, its arguments) of each call after the ARMED marker, in the order made."""
    calls, armed = [], False
    with open(log, errors="replace") as f:
        for line in f:
            if ARMED in line:
                armed = True
                continue
            m = re.match(r"\d+\s+(\w+)\((.*)", line)
            if armed and m is not None:
                calls.append((m.group(1), _arguments(m.group(2))))
    return calls


def section_calls(out: str) -> None:
    check = "(a) calls CUDA makes after start-up (strace) against the GPU filter"
    why = unavailable() or (None if shutil.which("strace") else "strace not installed")
    if why:
        return row(out, check, f"not run: {why}")
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "strace.log")
        done = subprocess.run(["strace", "-f", "-qq", "-X", "raw", "-o", log, sys.executable, "-c", TRACED],
                              cwd=REPO, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            return row(out, check, f"error: the traced run failed: {done.stderr.strip()[-200:]}")
        calls = _strace_calls(log)
    sorted_calls: dict[str, set] = {"allow": set(), "errno": set(), "trap": set(), "kill": set()}
    for name, args in calls:
        try:
            action, nr = verdict("gpu", name, args)[0], seccomp.sc.resolve_syscall(seccomp.sc.Arch.NATIVE, name)
        except ValueError:   # a call libseccomp does not know here: the filter's default answers it
            action, nr = "kill", None
        named = seccomp.describe(nr, (args + (0, 0, 0))[:3]) if nr is not None and action in ("trap", "kill") else name
        sorted_calls.setdefault(action, set()).add(named)
    row(out, check, f"{len(calls)} calls: allowed {len(sorted_calls['allow'])} kinds; errno rules "
                    f"{sorted(sorted_calls['errno']) or 'none'}; learned (refused, named) {sorted(sorted_calls['trap']) or 'none'}; "
                    f"KILLED {sorted(sorted_calls['kill']) or 'none'}")


def _uuid(raw: bytes) -> str:
    h = bytes(raw).hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def in_worker() -> dict:
    """In the confined GPU worker (CUDA started by its initialiser before the filter)."""
    import cupy
    from rtd.kernels import compile_model
    from tests.kernels.kernel_graphs import transformer_block
    start = time.perf_counter()
    model = compile_model(transformer_block(), device="cuda")
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 4, 8)).astype(np.float32)}
    outputs = [model.run(feeds)["out"] for _ in range(3)]
    return {"ms": round((time.perf_counter() - start) * 1e3, 1), "graph": model.plan_stats(feeds).get("cuda_graph"),
            "same": all(np.array_equal(o, outputs[0]) for o in outputs),
            "uuid": _uuid(cupy.cuda.runtime.getDeviceProperties(0)["uuid"]),
            "named": [seccomp.describe(t.nr, t.args) for t in sigsys.Refusals().new()]}


def _nvml_uuid(minor: int) -> str:
    import pynvml
    pynvml.nvmlInit()
    try:
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            if pynvml.nvmlDeviceGetMinorNumber(handle) == minor:
                return pynvml.nvmlDeviceGetUUID(handle)
        return "no such GPU"
    finally:
        pynvml.nvmlShutdown()


def _kernel_log() -> list[str]:
    done = subprocess.run(["dmesg"], capture_output=True, text=True)
    return [line for line in done.stdout.splitlines() if "type=1326" in line] if done.returncode == 0 else []


def section_confined(out: str) -> None:
    checks = ("(b) CUDA start-up and a transformer block inside the real worker root (enforcing GPU filter)",
              "(c) the device a worker granted /dev/nvidia0 gets: CUDA's UUID vs NVML's",
              "(d) CUDA graph captured inside the confined worker",
              "(a') unsafe_gpu_audit: calls the audit filter named (EPERM) or let through for the kernel's log")
    why = unavailable()
    if why:
        for check in checks:
            row(out, check, f"not run: {why}")
        return
    policies = {"gpu": load_policy({"limits": {"gpu_devices": [0], "gpu_memory_bytes": BUDGET}}),
                "audit": load_policy({"unsafe_gpu_audit": True, "limits": {"gpu_devices": [0], "gpu_memory_bytes": BUDGET}})}
    results = {}
    for name, policy in policies.items():
        logged = len(_kernel_log())
        try:
            results[name] = run_confined(in_worker, policy=policy, timeout=180)
        except SandboxKilled as e:
            results[name] = {"error": f"killed: {e} (a call outside the filter's lists)"}
        except RtdError as e:
            results[name] = {"error": str(e)}
        results[name]["logged"] = _kernel_log()[logged:]
    enforcing, audit = results["gpu"], results["audit"]
    if "error" in enforcing:
        row(out, checks[0], f"FAILED: {enforcing['error'][:300]}")
    else:
        row(out, checks[0], f"ok in {enforcing['ms']} ms (3 runs, identical: {enforcing['same']}); refused and named: "
                            f"{enforcing['named'] or 'none'}")
    nvml = _nvml_uuid(0)
    got = enforcing.get("uuid", "unknown")
    row(out, checks[1], f"{'match' if got == nvml else 'MISMATCH'}: CUDA device 0 {got}, NVML /dev/nvidia0 {nvml}")
    row(out, checks[2], f"cuda_graph {enforcing.get('graph')}" if "error" not in enforcing else "not run: (b) failed")
    row(out, checks[3], audit.get("error") or f"named {audit['named'] or 'none'}; kernel log {audit['logged'][-5:] or 'none'}")


def section_watch(out: str) -> None:
    check = "(e) NVML watcher in a pod-like pid namespace (own /proc): a CUDA process over the budget"
    why = unavailable() or (None if shutil.which("unshare") else "util-linux's unshare not installed")
    if why:
        return row(out, check, f"not run: {why}")
    done = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", POD], cwd=REPO,
                          capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONPATH=REPO))
    try:
        got = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return row(out, check, f"error (exit {done.returncode}): {done.stderr.strip()[-200:]}")
    if "refused" in got:
        return row(out, check, f"the watcher refused to start: {got['refused']}: {got['detail'][:200]}")
    if got["killed"] and got["latency_ms"]:
        return row(out, check, f"matched pod pid {got['pod_pid']} and killed it, poll to kill {got['latency_ms'][0]:.3f} ms")
    return row(out, check, f"NOT killed in 10 s; blind: {got['blind'] or 'no'} (a driver reporting host pids: expected)")
