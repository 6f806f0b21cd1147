"""The zygote's own side: the fork server. Started before the supervisor has threads, it
imports NumPy (rtd's CuPy backend where CuPy is installed), scipy.special, onnx and the
preload modules, sets glibc to keep large buffers warm (for the workers; the supervisor
returns what it frees) and compiles the seccomp filters (CPU and GPU variants), so a worker is one fork away from serving (nothing can be
imported after confinement).

Supervisor and fork server speak Kind.ZYGOTE frames, head {"op": ...}, on a SOCK_SEQPACKET
socketpair (see `channel`). It answers one request, "arm" (fds: the worker's end of a go
socket the supervisor keeps): fork a helper that joins the given leaf cgroup, unshares and
forks the worker. Everything else is events it reports as they happen, never blocking on
one child: "ready" (preloaded), "armed" (the confined worker waits for its job), "spawned"
(the worker got its job over the go socket and runs it), "failed" (a step failed before
that, or a request was malformed), "exit" (a helper ended)."""
import importlib
import importlib.util
import os
import select
import signal
import socket
import sys

from rtd import wire
from rtd.errors import Code, RtdError
from rtd.sandbox import channel, contain, gpu, seccomp, syscalls
from rtd.sandbox.policy import LAYERS, Policy, TenantIdentity
from rtd.wire import Kind

BASE_PRELOAD = ("numpy", "scipy.special", "onnx", "encodings.idna", "json", "struct", "mmap")
ARM = {"op": str, "id": str, "policy": dict, "identity": list, "procs": list, "layers": dict, "gpu": (dict, type(None))}


def start(preload: tuple) -> tuple[int, socket.socket]:
    """Fork the fork server; returns its pid and the supervisor's end of the control socket,
    on which its first report ("ready" or "failed") comes."""
    ours, theirs = channel.socketpair()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            ours.close()
            code = serve(theirs, preload)
        finally:
            os._exit(code)
    theirs.close()
    return pid, ours


def send(ctl: socket.socket, op: str, fds=(), **fields):
    channel.send(ctl, Kind.ZYGOTE, {"op": op, **fields}, fds)


def _failure(wid: str | None, e: RtdError) -> dict:
    return {"id": wid, "error": channel.error_head(e)}


def serve(ctl: socket.socket, preload: tuple) -> int:
    """The fork server's loop: arm on request, report progress, reap, die with the supervisor."""
    syscalls.prctl(syscalls.PR_SET_CHILD_SUBREAPER, 1)
    syscalls.prctl(syscalls.PR_SET_PDEATHSIG, signal.SIGKILL)
    try:
        _preload(preload)
    except Exception as e:
        send(ctl, "failed", **_failure(None, RtdError(Code.E_CONTAINMENT, f"preload failed: {type(e).__name__}: {e}")))
        return 1
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    send(ctl, "ready", pid=os.getpid())
    helpers: dict[int, _Helper] = {}
    while True:
        socks = [ctl, wake_r] + [h.reports.sock for h in helpers.values() if not h.reports.eof]
        readable = select.select(socks, [], [])[0]
        if ctl in readable:
            try:
                _arm(ctl, channel.receive(ctl, "zygote request"), helpers)
            except (EOFError, OSError):
                break
            except RtdError as e:   # not a frame: no id to answer, the pending request fails
                send(ctl, "failed", **_failure(None, e))
        for helper in helpers.values():
            if not helper.reports.eof and helper.reports.sock in readable:
                helper.reports.pump(0)
                helper.announce(ctl)
        if wake_r in readable:
            while True:
                try:
                    os.read(wake_r, 512)
                except BlockingIOError:
                    break
            _reap(ctl, helpers)
    for pid in helpers:
        os.kill(pid, signal.SIGKILL)   # the workers' death signal follows
    return 0


class _Helper:
    """One helper as the fork server sees it: its report pipe and what it has told the supervisor."""

    def __init__(self, wid: str, reports: contain.Reports):
        self.id, self.reports, self.told = wid, reports, None   # told: None | "armed" | "spawned" | "failed"

    def announce(self, ctl):
        r = self.reports
        if self.told in ("spawned", "failed"):
            return
        if r.error:
            self.told = "failed"
            send(ctl, "failed", id=self.id, error=r.error)
        elif r.ready and r.worker_pid:
            self.told = "spawned"
            send(ctl, "spawned", id=self.id, pid=r.worker_pid, steps=r.steps)
        elif "armed" in r.steps and r.worker_pid and self.told is None:
            self.told = "armed"
            send(ctl, "armed", id=self.id, pid=r.worker_pid)

    def ended(self, ctl):
        self.reports.drain(0.5)
        self.announce(ctl)
        if self.told != "spawned" and self.told != "failed":
            send(ctl, "failed", **_failure(self.id, RtdError(
                Code.E_CONTAINMENT, "the helper exited before the worker was confined")))


def _arm(ctl, frame: wire.Frame, helpers: dict):
    """Fork a helper for the leaf the request names; its worker reports "armed" once confined."""
    msg, passed = frame.head, frame.fds
    wid = msg.get("id") if isinstance(msg.get("id"), str) else None
    try:
        if (frame.kind is not Kind.ZYGOTE or frame.tensors or len(passed) != 1 or not channel.fits(msg, ARM)
                or msg["op"] != "arm" or not all(type(p) is str for p in msg["procs"])
                or not all(type(v) is str for v in msg["layers"].values()) or not set(LAYERS) <= msg["layers"].keys()
                or len(msg["identity"]) != 3):
            raise channel.malformed("zygote request", "an arm request with one go socket expected")
        name, uid, gid = msg["identity"]
        policy = Policy.from_dict(msg["policy"])
        grant = None if msg["gpu"] is None else gpu.Grant.from_dict(msg["gpu"])
        spec = contain.Spec(policy, TenantIdentity(name, uid, gid), msg["procs"], msg["layers"],
                            contain.seccomp_program(msg["layers"], policy), grant,
                            gpu.initializer(grant.init) if grant else None)
        with socket.socket(fileno=passed.pop()) as go:
            pid, report_sock = contain.launch(spec, go=go, resolve=_resolve)
    except RtdError as e:
        send(ctl, "failed", **_failure(wid, e))
        return
    finally:
        for fd in passed:
            os.close(fd)
    helpers[pid] = _Helper(wid, contain.Reports(report_sock))


def _reap(ctl, helpers: dict):
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        helper = helpers.pop(pid, None)
        if helper is None:
            continue   # an orphaned worker reparented to us
        helper.ended(ctl)
        code, sig, cpu_s = contain.ended(status, helper.reports)
        send(ctl, "exit", id=helper.id, code=code, signal=sig, cpu_s=cpu_s)


def _preload(modules: tuple) -> None:
    wire.keep_large_buffers_warm()   # first: every buffer the workers inherit is allocated after it
    import numpy
    for name in BASE_PRELOAD + modules:
        importlib.import_module(name)
    if importlib.util.find_spec("cupy"):   # CuPy's backend for GPU tenants; CUDA stays uninitialised (no fork survives it)
        importlib.import_module(gpu.CUDA_INIT.partition(":")[0])
    numpy.ones((64, 64)) @ numpy.ones((64, 64))   # start the BLAS thread pool before forking
    for variant in seccomp.VARIANTS:                # compile the filters before any fork
        seccomp.compiled(variant)


def _resolve(target: str):
    """In the helper: the preloaded function `module:function` names."""
    module, _, name = target.partition(":")
    if module not in sys.modules:
        raise RtdError(Code.E_CONTAINMENT, f"target module {module!r} was not preloaded by the zygote")
    fn = getattr(sys.modules[module], name, None)
    if not callable(fn):
        raise RtdError(Code.E_CONTAINMENT, f"target {target!r} is not a function")
    return fn
