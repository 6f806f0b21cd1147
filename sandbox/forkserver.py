"""The zygote's own side: the fork server. Started before the supervisor has threads, it
imports NumPy (CuPy when present), scipy.special, onnx and the preload modules and
compiles the seccomp filter, so a worker is one fork away from serving (nothing can be
imported after confinement).

It answers one request, "arm": fork a helper that joins the given leaf cgroup, unshares
and forks the worker, handing on the worker's end of a go socket the supervisor keeps.
Everything else is events it reports as they happen, never blocking on one child:
"armed" (the confined worker waits for its job), "spawned" (the worker got its job over
the go socket and runs it), "failed" (a step failed before that), "exit" (a helper ended)."""
import importlib
import json
import os
import select
import signal
import socket
import sys

from rtd.errors import Code, RtdError
from rtd.sandbox import contain, seccomp, syscalls
from rtd.sandbox.policy import Policy, TenantIdentity

BASE_PRELOAD = ("numpy", "scipy.special", "onnx", "encodings.idna", "json", "struct", "mmap")
MAX_MSG = 1 << 20


def send(sock: socket.socket, fds=(), **msg):
    data = json.dumps(msg).encode()
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.send(data)


def serve(ctl: socket.socket, preload: tuple) -> int:
    """The fork server's loop: arm on request, report progress, reap, die with the supervisor."""
    syscalls.prctl(syscalls.PR_SET_CHILD_SUBREAPER, 1)
    syscalls.prctl(syscalls.PR_SET_PDEATHSIG, signal.SIGKILL)
    try:
        _preload(preload)
    except Exception as e:
        send(ctl, op="failed", error=f"preload failed: {type(e).__name__}: {e}")
        return 1
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    send(ctl, op="ready", pid=os.getpid())
    helpers: dict[int, _Helper] = {}
    while True:
        fds = [ctl, wake_r] + [h.reports.fd for h in helpers.values() if not h.reports.eof]
        readable = select.select(fds, [], [])[0]
        if ctl in readable:
            try:
                data, passed, _, _ = socket.recv_fds(ctl, MAX_MSG, 1)
            except OSError:
                data, passed = b"", []
            if not data:
                break
            _arm(ctl, json.loads(data), passed, helpers)
        for helper in helpers.values():
            if not helper.reports.eof and helper.reports.fd in readable:
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
            send(ctl, op="failed", id=self.id, error=r.error)
        elif r.ready and r.worker_pid:
            self.told = "spawned"
            send(ctl, op="spawned", id=self.id, pid=r.worker_pid, steps=r.steps)
        elif "armed" in r.steps and r.worker_pid and self.told is None:
            self.told = "armed"
            send(ctl, op="armed", id=self.id, pid=r.worker_pid)

    def ended(self, ctl):
        self.reports.drain(0.5)
        self.announce(ctl)
        if self.told != "spawned" and self.told != "failed":
            send(ctl, op="failed", id=self.id,
                 error={"code": Code.E_CONTAINMENT.name, "detail": "the helper exited before the worker was confined"})


def _arm(ctl, msg: dict, passed: list, helpers: dict):
    """Fork a helper for the leaf in `msg`; its worker reports "armed" once confined."""
    try:
        if msg.get("op") != "arm" or len(passed) != 1:
            raise RtdError(Code.E_CONTAINMENT, "malformed request to the zygote")
        name, uid, gid = msg["identity"]
        spec = contain.Spec(Policy.from_dict(msg["policy"]), TenantIdentity(name, uid, gid), list(msg["procs"]),
                            msg["layers"], contain.seccomp_program(msg["layers"]))
        with socket.socket(fileno=passed.pop()) as go:
            pid, report_fd = contain.launch(spec, go=go, resolve=_resolve)
    except RtdError as e:
        send(ctl, op="failed", id=msg.get("id"), error={"code": e.code.name, "detail": e.detail})
        return
    finally:
        for fd in passed:
            os.close(fd)
    helpers[pid] = _Helper(msg["id"], contain.Reports(report_fd))


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
        send(ctl, op="exit", id=helper.id, code=code, signal=sig, cpu_s=cpu_s)


def _preload(modules: tuple) -> None:
    import numpy
    for name in BASE_PRELOAD + modules:
        importlib.import_module(name)
    try:
        importlib.import_module("cupy")
    except ImportError:
        pass
    numpy.ones((64, 64)) @ numpy.ones((64, 64))   # start the BLAS thread pool before forking
    seccomp.compiled()                              # compile the filter before any fork


def _resolve(target: str):
    """In the helper: the preloaded function `module:function` names."""
    module, _, name = target.partition(":")
    if module not in sys.modules:
        raise RtdError(Code.E_CONTAINMENT, f"target module {module!r} was not preloaded by the zygote")
    fn = getattr(sys.modules[module], name, None)
    if not callable(fn):
        raise RtdError(Code.E_CONTAINMENT, f"target {target!r} is not a function")
    return fn
