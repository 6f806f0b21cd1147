"""The zygote: a fork server started before the supervisor has threads, with NumPy (CuPy
when present), scipy.special, onnx and the preload modules imported and the seccomp
filter compiled, so a worker is one fork away from serving. Nothing can be imported
after confinement, which is why everything is imported here.

Supervisor <-> zygote: JSON over a SOCK_SEQPACKET socketpair; the worker's socket travels
with SCM_RIGHTS. The supervisor side creates and owns the cgroups; the zygote forks,
reaps, and reports exits.

A spawn is two requests: "arm" forks a helper that joins a fresh leaf cgroup and
unshares, "start" hands it the job. Joining a cgroup waits for an RCU grace period
(5-20 ms here, once per burst of migrations), so after each spawn the zygote arms a
spare for that tenant in the background: the tenant's next (re)start takes the spare
and pays only the fork and the worker's own confinement. A spare is one idle helper
and an empty leaf per tenant; `Zygote.start(spares=False)` turns them off."""
import dataclasses
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


@dataclasses.dataclass(frozen=True)
class Spare:
    """An armed helper (in its own leaf cgroup, namespaces unshared) waiting for a job."""
    id: str
    cgroup: WorkerCgroup
    layers: dict
    policy: Policy
    identity: TenantIdentity


class Zygote:
    """Supervisor-side client of the fork server."""

    def __init__(self, pid: int, ctl: socket.socket, spares: bool = True):
        self.pid, self._ctl, self._auto_spares = pid, ctl, spares
        self._layout = detect_layout()   # the host's cgroup hierarchies do not change while we run
        self._handles: dict[str, WorkerHandle] = {}
        self._spares: dict[str, Spare] = {}   # tenant name -> its armed spare
        self._replies: queue.Queue = queue.Queue()
        self._spawn_lock = threading.Lock()   # one request to the zygote at a time
        self._spare_lock = threading.Condition()   # _spares (also touched by the reader), _arming
        self._arming = 0                           # spares being armed in the background
        self._closed = False
        self._reader = threading.Thread(target=self._read_loop, name="rtd-zygote-reader", daemon=True)
        self._reader.start()

    @classmethod
    def start(cls, preload=(), spares: bool = True) -> "Zygote":
        """Fork the fork server. Call before the caller starts any thread. With `spares`, each
        spawn arms the tenant's next worker ahead of time (see the module docstring)."""
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
        return cls(pid, ours, spares)

    def spawn(self, target: str, policy: Policy | None = None, identity: TenantIdentity | None = None,
              sock: socket.socket | None = None, args=()) -> WorkerHandle:
        """Start `module:function` as a confined worker called as function(sock, *args)."""
        if identity is None or sock is None:
            raise RtdError(Code.E_POLICY_INVALID, "spawn needs an identity and a socket")
        policy = policy or load_policy()
        with self._spawn_lock:
            with self._spare_lock:
                spare = self._spares.get(identity.name)
                if spare is not None and (spare.policy, spare.identity) == (policy, identity):
                    del self._spares[identity.name]
                else:
                    spare = None   # a stale spare stays until a matching one replaces it
            armed_now = spare is None
            if armed_now:
                spare = self._arm(policy, identity)
            handle = WorkerHandle(spare.id, spare.cgroup, spare.layers, policy.limits.cpu_seconds)
            self._handles[spare.id] = handle
            reply = self._request([sock.fileno()], op="start", id=spare.id, target=target, args=list(args),
                                  armed_now=armed_now)
        if reply["op"] != "spawned":
            self._handles.pop(spare.id, None)
            _discard(spare)
            raise RtdError(Code[reply["error"]["code"]], reply["error"]["detail"])
        handle.pid, handle.startup_ms = reply["pid"], reply["steps"]
        if self._auto_spares:
            with self._spare_lock:
                self._arming += 1
            threading.Thread(target=self._refill, args=(policy, identity), name="rtd-zygote-spare",
                             daemon=True).start()
        return handle

    def prepare(self, policy: Policy | None, identity: TenantIdentity) -> Spare:
        """Arm a spare for the tenant now unless a matching one is ready; its next spawn takes
        it. Raises RtdError like spawn (strict refusal, cgroup or helper failure)."""
        policy = policy or load_policy()
        with self._spawn_lock:
            with self._spare_lock:
                old = self._spares.get(identity.name)
            if old is not None and (old.policy, old.identity) == (policy, identity):
                return old
            if self._closed:
                raise RtdError(Code.E_CONTAINMENT, "zygote closed")
            spare = self._arm(policy, identity)
            with self._spare_lock:
                old = self._spares.pop(identity.name, None)
                self._spares[identity.name] = spare
        if old is not None:
            _discard(old)
        return spare

    def spares(self) -> list[Spare]:
        with self._spare_lock:
            return list(self._spares.values())

    def settle(self, timeout: float = 10.0) -> bool:
        """Wait until no spare is being armed in the background; False on timeout."""
        with self._spare_lock:
            return self._spare_lock.wait_for(lambda: self._arming == 0, timeout)

    def _refill(self, policy: Policy, identity: TenantIdentity):
        try:
            self.prepare(policy, identity)
        except RtdError as e:   # the next spawn arms on its path and reports the refusal itself
            log.warning("spare for tenant %s not armed: %s", identity.name, e)
        finally:
            with self._spare_lock:
                self._arming -= 1
                self._spare_lock.notify_all()

    def _arm(self, policy: Policy, identity: TenantIdentity) -> Spare:
        """Make a leaf cgroup and have the zygote fork a helper that joins it and unshares."""
        wid = f"z{os.getpid()}-{next(_ids)}"
        cg, layers, _ = contain.prepare(policy, identity, wid, self._layout)
        reply = self._request([], op="arm", id=wid, policy=policy.to_dict(),
                              identity=[identity.name, identity.uid, identity.gid], procs=cg.procs_files, layers=layers)
        spare = Spare(wid, cg, layers, policy, identity)
        if reply["op"] != "armed":
            _discard(spare)
            raise RtdError(Code[reply["error"]["code"]], reply["error"]["detail"])
        return spare

    def _request(self, fds: list, **msg) -> dict:
        """One request to the zygote and its answer (caller holds _spawn_lock)."""
        try:
            _send(self._ctl, fds, **msg)
            reply = self._replies.get(timeout=30)
            while reply.get("id", msg["id"]) != msg["id"]:   # a late answer to an earlier, abandoned request
                reply = self._replies.get(timeout=30)
            return reply
        except (OSError, queue.Empty) as e:
            return {"op": "failed", "error": {"code": Code.E_CONTAINMENT.name, "detail": f"zygote: {e}"}}

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
                    self._spare_died(msg["id"])
            else:
                self._replies.put(msg)
        for handle in list(self._handles.values()):   # zygote gone: its workers died with it
            handle.kill()
            handle._finish(None, signal.SIGKILL, 0.0)
        self._replies.put({"op": "failed", "error": {"code": Code.E_CONTAINMENT.name, "detail": "zygote exited"}})

    def _spare_died(self, wid: str):
        with self._spare_lock:
            spare = next((sp for sp in self._spares.values() if sp.id == wid), None)
            if spare is not None:
                del self._spares[spare.identity.name]
        if spare is not None:
            log.warning("spare %s for tenant %s exited; the next spawn arms afresh", wid, spare.identity.name)
            _discard(spare)

    def close(self):
        with self._spawn_lock:
            self._closed = True
        for handle in list(self._handles.values()):
            handle.kill()
        for spare in self.spares():
            spare.cgroup.kill()
        try:
            self._ctl.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        contain.reap(self.pid, 10.0)
        self._reader.join(10)
        self._ctl.close()
        with self._spare_lock:
            spares, self._spares = list(self._spares.values()), {}
        for spare in spares:
            _discard(spare)


def _discard(spare: Spare):
    """Kill a spare's helper (if any) and remove its leaf; a leak is reported, not hidden."""
    try:
        spare.cgroup.kill()
        spare.cgroup.remove()
    except RtdError as e:
        log.error("spare %s: %s", spare.id, e)


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
    """The fork server's loop: arm and start on request, reap, report exits, die with the supervisor."""
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
    armed: dict[str, tuple] = {}                            # id -> (go socket, fork time) of a waiting helper
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
            msg = json.loads(data)
            try:
                if msg.get("op") == "arm" and not passed:
                    _arm(msg, workers, armed)
                    _send(ctl, op="armed", id=msg["id"])
                elif msg.get("op") == "start" and len(passed) == 1:
                    pid, steps = _start(msg, passed[0], workers, armed)
                    _send(ctl, op="spawned", id=msg["id"], pid=pid, steps=steps)
                else:
                    raise RtdError(Code.E_CONTAINMENT, "malformed request to the zygote")
            except RtdError as e:
                _send(ctl, op="failed", id=msg.get("id"), error={"code": e.code.name, "detail": e.detail})
            finally:
                for fd in passed:
                    os.close(fd)
        for _, reports in workers.values():
            if not reports.eof and reports.fd in readable:
                reports.pump(0)
        if wake_r in readable:
            while True:
                try:
                    os.read(wake_r, 512)
                except BlockingIOError:
                    break
            _reap(ctl, workers, armed)
    for helper in workers:
        os.kill(helper, signal.SIGKILL)   # the workers' death signal follows
    return 0


def _arm(msg: dict, workers: dict, armed: dict):
    """Fork a helper that joins the leaf and unshares, and wait until it has."""
    policy = Policy.from_dict(msg["policy"])
    name, uid, gid = msg["identity"]
    spec = contain.Spec(policy, TenantIdentity(name, uid, gid), list(msg["procs"]), msg["layers"],
                        contain.seccomp_program(msg["layers"]))
    forked = time.perf_counter()
    helper, report_fd, go = contain.launch(spec, resolve=_resolve)
    reports = contain.Reports(report_fd)
    workers[helper], armed[msg["id"]] = (msg["id"], reports), (go, forked)
    try:
        reports.expect_armed(10.0)
    except RtdError:
        armed.pop(msg["id"])[0].close()   # EOF on its go socket: the helper gives up, if it still lives
        raise


def _start(msg: dict, sock_fd: int, workers: dict, armed: dict) -> tuple[int, dict]:
    """Hand an armed helper its job; (worker host pid, step durations) once the worker is confined.
    The steps count from the helper's fork when it was armed for this very spawn, else from the job."""
    go, forked = armed.pop(msg["id"], (None, None))
    if go is None:
        raise RtdError(Code.E_CONTAINMENT, f"no armed helper {msg['id']!r} (it exited)")
    with go:
        _resolve(msg["target"])   # refuse an unknown target here, with a clear reason
        launched = forked if msg.get("armed_now") else time.perf_counter()
        contain.send_job(go, msg["target"], msg["args"], sock_fd)
    reports = next(r for wid, r in workers.values() if wid == msg["id"])
    return reports.expect_ready(10.0), contain.step_durations(launched, reports.steps)


def _reap(ctl, workers: dict, armed: dict):
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
        if wid in armed:
            armed.pop(wid)[0].close()
        reports.drain(0.5)
        code, sig, cpu_s = contain.ended(status, reports)
        _send(ctl, op="exit", id=wid, code=code, signal=sig, cpu_s=cpu_s)
