"""The zygote: a fork server started before the supervisor has threads, with NumPy (CuPy
when present), scipy.special, onnx and the preload modules imported and the seccomp
filter compiled, so a worker is one fork away from serving. Nothing can be imported
after confinement, which is why everything is imported here.

Supervisor <-> zygote: JSON over a SOCK_SEQPACKET socketpair; the worker's socket travels
with SCM_RIGHTS. The supervisor side creates and owns the cgroups; the zygote forks,
reaps, and reports exits."""
import importlib
import itertools
import json
import logging
import os
import queue
import select
import signal
import socket
import sys
import threading
import time

from rtd.errors import Code, RtdError
from rtd.sandbox import contain, seccomp, syscalls
from rtd.sandbox.cgroup import WorkerCgroup, detect_layout
from rtd.sandbox.policy import Policy, TenantIdentity, load_policy

log = logging.getLogger("rtd.sandbox")
BASE_PRELOAD = ("numpy", "scipy.special", "onnx", "encodings.idna", "json", "struct", "mmap")
MAX_MSG = 1 << 20
_ids = itertools.count()   # worker names: z<supervisor pid>-<n>, unique across zygotes


def _send(sock: socket.socket, fds=(), **msg):
    data = json.dumps(msg).encode()
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.send(data)


class WorkerHandle:
    """One confined worker started by the zygote."""

    def __init__(self, wid: str, cgroup: WorkerCgroup, layers: dict, cpu_seconds: int):
        self.id, self.cgroup, self.layers, self._cpu_seconds = wid, cgroup, layers, cpu_seconds
        self.pid = None          # the worker's host pid (pid 1 inside its namespace)
        self.startup_ms = {}     # confinement step -> milliseconds it took in the zygote's children
        self._done = threading.Event()
        self._status = None
        self._killed = False

    def _finish(self, code, sig, cpu_s):
        self._status = contain.exit_status(code, sig, cpu_s, self.cgroup.oom_kills(), self._killed, self._cpu_seconds)
        try:
            self.cgroup.remove()
        except RtdError as e:   # keep serving the other workers; the leak is reported, not hidden
            log.error("worker %s: %s", self.id, e)
        finally:
            self._done.set()

    def wait(self, timeout: float | None = None) -> contain.ExitStatus | None:
        return self._status if self._done.wait(timeout) else None

    def alive(self) -> bool:
        return not self._done.is_set()

    def kill(self):
        """Hard kill of the worker's whole cgroup (or its pid namespace)."""
        if self._done.is_set():
            return
        self._killed = True
        self.cgroup.kill()
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)   # pid 1 of its namespace: the kernel kills the rest
            except ProcessLookupError:
                pass

    def usage(self) -> dict:
        return self.cgroup.usage()


class Zygote:
    """Supervisor-side client of the fork server."""

    def __init__(self, pid: int, ctl: socket.socket):
        self.pid, self._ctl = pid, ctl
        self._layout = detect_layout()   # the host's cgroup hierarchies do not change while we run
        self._handles: dict[str, WorkerHandle] = {}
        self._replies: queue.Queue = queue.Queue()
        self._spawn_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read_loop, name="rtd-zygote-reader", daemon=True)
        self._reader.start()

    @classmethod
    def start(cls, preload=()) -> "Zygote":
        """Fork the fork server. Call before the caller starts any thread."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                ours.close()
                code = _serve(theirs, tuple(preload))
            finally:
                os._exit(code)
        theirs.close()
        msg = json.loads(ours.recv(MAX_MSG) or b'{"op": "failed", "error": "zygote died while starting"}')
        if msg["op"] != "ready":
            os.waitpid(pid, 0)
            raise RtdError(Code.E_CONTAINMENT, f"zygote: {msg['error']}")
        return cls(pid, ours)

    def spawn(self, target: str, policy: Policy | None = None, identity: TenantIdentity | None = None,
              sock: socket.socket | None = None, args=()) -> WorkerHandle:
        """Start `module:function` as a confined worker called as function(sock, *args)."""
        if identity is None or sock is None:
            raise RtdError(Code.E_POLICY_INVALID, "spawn needs an identity and a socket")
        policy = policy or load_policy()
        wid = f"z{os.getpid()}-{next(_ids)}"
        cg, layers, _ = contain.prepare(policy, identity, wid, self._layout)
        handle = WorkerHandle(wid, cg, layers, policy.limits.cpu_seconds)
        with self._spawn_lock:
            self._handles[wid] = handle
            try:
                _send(self._ctl, [sock.fileno()], op="spawn", id=wid, target=target, args=list(args),
                      policy=policy.to_dict(), identity=[identity.name, identity.uid, identity.gid],
                      procs=cg.procs_files, layers=layers)
                reply = self._replies.get(timeout=30)
                while reply.get("id", wid) != wid:   # a late answer to an earlier, abandoned spawn
                    reply = self._replies.get(timeout=30)
            except (OSError, queue.Empty) as e:
                reply = {"op": "failed", "error": {"code": Code.E_CONTAINMENT.name, "detail": f"zygote: {e}"}}
        if reply["op"] != "spawned":
            self._handles.pop(wid, None)
            cg.kill()
            cg.remove()
            raise RtdError(Code[reply["error"]["code"]], reply["error"]["detail"])
        handle.pid, handle.startup_ms = reply["pid"], reply["steps"]
        return handle

    def _read_loop(self):
        while True:
            try:
                data = self._ctl.recv(MAX_MSG)
            except OSError:
                data = b""
            if not data:
                break
            msg = json.loads(data)
            if msg["op"] == "exit":
                handle = self._handles.pop(msg["id"], None)
                if handle:
                    handle._finish(msg["code"], msg["signal"], msg["cpu_s"])
            else:
                self._replies.put(msg)
        for handle in list(self._handles.values()):   # zygote gone: its workers died with it
            handle.kill()
            handle._finish(None, signal.SIGKILL, 0.0)
        self._replies.put({"op": "failed", "error": {"code": Code.E_CONTAINMENT.name, "detail": "zygote exited"}})

    def close(self):
        for handle in list(self._handles.values()):
            handle.kill()
        try:
            self._ctl.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        contain.reap(self.pid, 10.0)
        self._reader.join(10)
        self._ctl.close()


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
    module, _, name = target.partition(":")
    if module not in sys.modules:
        raise RtdError(Code.E_CONTAINMENT, f"target module {module!r} was not preloaded by the zygote")
    fn = getattr(sys.modules[module], name, None)
    if not callable(fn):
        raise RtdError(Code.E_CONTAINMENT, f"target {target!r} is not a function")
    return fn


def _serve(ctl: socket.socket, preload: tuple) -> int:
    """The fork server's loop: spawn on request, reap, report exits, die with the supervisor."""
    syscalls.prctl(syscalls.PR_SET_CHILD_SUBREAPER, 1)
    syscalls.prctl(syscalls.PR_SET_PDEATHSIG, signal.SIGKILL)
    try:
        _preload(preload)
    except Exception as e:
        _send(ctl, op="failed", error=f"preload failed: {type(e).__name__}: {e}")
        return 1
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    _send(ctl, op="ready", pid=os.getpid())
    workers: dict[int, tuple[str, contain.Reports]] = {}   # helper pid -> (id, reports)
    while True:
        fds = [ctl, wake_r] + [r.fd for _, r in workers.values() if not r.eof]
        readable = select.select(fds, [], [])[0]
        if ctl in readable:
            try:
                data, passed, _, _ = socket.recv_fds(ctl, MAX_MSG, 1)
            except OSError:
                data, passed = b"", []
            if not data:
                break
            _spawn(ctl, json.loads(data), passed, workers)
        for _, reports in workers.values():
            if not reports.eof and reports.fd in readable:
                reports.pump(0)
        if wake_r in readable:
            while True:
                try:
                    os.read(wake_r, 512)
                except BlockingIOError:
                    break
            _reap(ctl, workers)
    for helper in workers:
        os.kill(helper, signal.SIGKILL)   # the workers' death signal follows
    return 0


def _spawn(ctl, msg: dict, passed: list, workers: dict):
    try:
        if msg.get("op") != "spawn" or len(passed) != 1:
            raise RtdError(Code.E_CONTAINMENT, "malformed spawn request")
        policy = Policy.from_dict(msg["policy"])
        name, uid, gid = msg["identity"]
        spec = contain.Spec(_resolve(msg["target"]), tuple(msg["args"]), passed[0], policy,
                            TenantIdentity(name, uid, gid), list(msg["procs"]), msg["layers"],
                            contain.seccomp_program(msg["layers"]))
        launched = time.perf_counter()
        helper, report_fd = contain.launch(spec)
    except RtdError as e:
        _send(ctl, op="failed", id=msg.get("id"), error={"code": e.code.name, "detail": e.detail})
        return
    finally:
        for fd in passed:
            os.close(fd)
    reports = contain.Reports(report_fd)
    workers[helper] = (msg["id"], reports)
    try:
        pid = reports.expect_ready(10.0)
    except RtdError as e:
        _send(ctl, op="failed", id=msg["id"], error={"code": e.code.name, "detail": e.detail})
        return
    _send(ctl, op="spawned", id=msg["id"], pid=pid, steps=contain.step_durations(launched, reports.steps))


def _reap(ctl, workers: dict):
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid not in workers:
            continue   # an orphaned worker reparented to us
        wid, reports = workers.pop(pid)
        reports.drain(0.5)
        code, sig, cpu_s = contain.ended(status, reports)
        _send(ctl, op="exit", id=wid, code=code, signal=sig, cpu_s=cpu_s)
