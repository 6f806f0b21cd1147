"""The supervisor's side of the zygote (the fork server in `forkserver`): it creates and
owns the leaf cgroups, keeps each armed worker's go socket, hands workers their jobs, and
turns the fork server's reports into WorkerHandles. Kind.ZYGOTE frames on a SOCK_SEQPACKET
socketpair, sockets as frame fds. A report it cannot parse ends the fork server (what it
says about its workers can no longer be trusted; they die with it), and every request
then fails with E_CONTAINMENT.

Each zygote has an instance id: its workers' cgroups are <base>/<instance>/<tenant>/<worker>,
so two daemons on one host never share a directory. A daemon passes a stable id and calls
`cleanup_instance` with it at start, to remove what a predecessor killed with SIGKILL left.

A spawn arms a helper (forked by the zygote, it joins a fresh leaf cgroup, unshares and
forks the worker, which confines itself) and sends the worker its job — target, args,
its socket — straight over the go socket. Joining a cgroup waits for an RCU grace period
(5-20 ms on a loaded host; once per burst of migrations, not per write), and every
hand-off to a new process waits for a CPU, so after each spawn a spare is armed for that
tenant in the background: a worker confined by every layer of the tenant's policy,
waiting for a job. The tenant's next (re)start with the same policy takes it. A spare
is one idle helper, one idle confined worker and a leaf per tenant;
`Zygote.start(spares=False)` turns them off."""
import contextlib
import dataclasses
import itertools
import logging
import os
import queue
import signal
import socket
import threading
import time

from rtd.errors import Code, RtdError
from rtd.sandbox import channel, contain, forkserver, gpu
from rtd.sandbox.cgroup import WorkerCgroup, check_instance, detect_layout
from rtd.sandbox.channel import NUMBER, OPTIONAL_INT
from rtd.sandbox.policy import Policy, TenantIdentity, load_policy
from rtd.wire import Kind

log = logging.getLogger("rtd.sandbox")
_ids = itertools.count()   # worker names: z<supervisor pid>-<n>, unique across zygotes
# Arming a spare is a few ms of Python in the supervisor; started at once, it holds the GIL
# just when the caller talks to the worker it was handed (measured: +5 ms, one switch interval).
REFILL_DELAY_S = 0.05
# What the fork server may report, by op (besides "op" itself); "failed" without an id
# answers whatever request is pending (the fork server failed as a whole).
REPORTS = {"ready": {"pid": int}, "armed": {"id": str, "pid": int},
           "spawned": {"id": str, "pid": int, "steps": dict}, "failed": {"id": (str, type(None)), "error": channel.ERROR},
           "exit": {"id": str, "code": OPTIONAL_INT, "signal": OPTIONAL_INT, "cpu_s": NUMBER}}


def _report(head: dict) -> dict:
    """A fork server report, checked against REPORTS; RtdError(E_CONTAINMENT) otherwise."""
    shape = REPORTS.get(head.get("op"))
    if (shape is None or not channel.fits(head, {"op": str, **shape})
            or not all(type(k) is str and type(v) in NUMBER for k, v in head.get("steps", {}).items())):
        raise channel.malformed("zygote report", f"{head!r:.80}")
    if "error" in head:
        channel.error_of(head["error"], "zygote report")
    return head


def _failed(e: RtdError) -> dict:
    return {"op": "failed", "error": channel.error_head(e)}


class WorkerHandle:
    """One confined worker started by the zygote."""

    def __init__(self, wid: str, cgroup: WorkerCgroup, layers: dict, cpu_seconds: int):
        self.id, self.cgroup, self.layers, self._cpu_seconds = wid, cgroup, layers, cpu_seconds
        self.pid = None          # the worker's host pid (pid 1 inside its namespace)
        self._launched = None    # perf_counter() when the spawn began
        self._steps, self._steps_known = {}, threading.Event()
        self._done = threading.Event()
        self._status = None
        self._killed = False
        self._killed_by: tuple[str, str] | None = None   # (layer, reason) of a supervisor-side limit's kill

    @property
    def startup_ms(self) -> dict[str, float]:
        """Confinement step -> ms on this spawn's path, as the zygote reports it (shortly after the
        worker is ready; waits up to 2 s for that report). A spare's ahead-of-time steps are not counted."""
        self._steps_known.wait(2.0)
        return dict(self._steps)

    def _reported(self, steps: dict):
        self._steps = contain.step_durations(self._launched, steps)
        self._steps_known.set()

    def _finish(self, code, sig, cpu_s):
        self._status = contain.exit_status(code, sig, cpu_s, self.cgroup.oom_kills(), self._killed, self._cpu_seconds)
        if self._killed_by is not None and sig == signal.SIGKILL and self._status.layer is None:
            self._status = contain.ExitStatus(None, sig, *self._killed_by)
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

    def kill(self, layer: str | None = None, reason: str = ""):
        """Hard kill of the worker's whole cgroup (or its pid namespace); `layer` names a
        limit enforced from the supervisor's side (the NVML watcher: "gpu"), so that the
        exit status says which layer ended it and why. Safe from any thread."""
        if self._done.is_set():
            return
        if layer is not None and self._killed_by is None:
            self._killed_by = (layer, reason)
        self._killed = True
        self.cgroup.kill()
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)   # pid 1 of its namespace: the kernel kills the rest
            except ProcessLookupError:
                pass

    def usage(self) -> dict:
        return self.cgroup.usage()

    def tenant_usage(self) -> dict:
        """What all of this tenant's workers use together (see WorkerCgroup.tenant_usage)."""
        return self.cgroup.tenant_usage()


@dataclasses.dataclass(frozen=True)
class Spare:
    """An armed spare: helper and worker in their own leaf, the worker confined, waiting for a job."""
    id: str
    cgroup: WorkerCgroup
    layers: dict
    policy: Policy
    identity: TenantIdentity
    go: socket.socket = dataclasses.field(repr=False, compare=False)
    pid: int | None = None   # the waiting worker's host pid, once armed


class Zygote:
    """Supervisor-side client of the fork server."""

    def __init__(self, pid: int, ctl: socket.socket, spares: bool = True, instance: str | None = None,
                 driver: gpu.Driver = gpu.DRIVER):
        self.pid, self._ctl, self._auto_spares, self._driver = pid, ctl, spares, driver
        self.instance = check_instance(f"z{os.getpid()}" if instance is None else instance)
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
    def start(cls, preload=(), spares: bool = True, instance: str | None = None,
              driver: gpu.Driver = gpu.DRIVER) -> "Zygote":
        """Fork the fork server. Call before the caller starts any thread. With `spares`, each
        spawn arms the tenant's next worker ahead of time (see the module docstring).
        `instance` (1-64 of [A-Za-z0-9_-]) names this rtd's cgroup subtree; a daemon passes
        a stable one, so that `cleanup_instance` finds what its predecessor left. Default:
        z<pid>. `driver`: where GPU tenants' device nodes, driver libraries and initialiser are."""
        if instance is not None:
            check_instance(instance)   # refused before anything is forked
        pid, ours = forkserver.start(tuple(preload))
        try:
            msg = _report(channel.receive_head(ours, Kind.ZYGOTE, "zygote report"))
        except EOFError:
            msg = _failed(RtdError(Code.E_CONTAINMENT, "zygote died while starting"))
        except RtdError as e:
            msg = _failed(e)
        if msg["op"] != "ready":
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            ours.close()
            raise channel.error_of(msg["error"], "zygote report")
        return cls(pid, ours, spares, instance, driver)

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
            launched = time.perf_counter()
            if spare is None:
                spare = self._arm(policy, identity, wait=False)
            handle = WorkerHandle(spare.id, spare.cgroup, spare.layers, policy.limits.cpu_seconds)
            handle._launched = launched
            self._handles[spare.id] = handle
            reply = self._hand_job(spare, target, args, sock)
        if reply["op"] == "failed":
            self._handles.pop(spare.id, None)
            _discard(spare)
            raise channel.error_of(reply["error"], "zygote report")
        handle.pid = reply["pid"]
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
            time.sleep(REFILL_DELAY_S)
            self.prepare(policy, identity)
        except RtdError as e:   # the next spawn arms on its path and reports the refusal itself
            if not self._closed:
                log.warning("spare for tenant %s not armed: %s", identity.name, e)
        finally:
            with self._spare_lock:
                self._arming -= 1
                self._spare_lock.notify_all()

    def _arm(self, policy: Policy, identity: TenantIdentity, wait: bool = True) -> Spare:
        """Make a leaf cgroup and have the zygote fork a helper that joins it, unshares and forks
        the worker; with `wait`, return once the worker is confined (else the job may be sent at
        once: it waits in the socket)."""
        wid = f"z{os.getpid()}-{next(_ids)}"
        cg, layers, _, grant = contain.prepare(policy, identity, self.instance, wid, self._layout, self._driver)
        ours, theirs = channel.socketpair()
        spare = Spare(wid, cg, layers, policy, identity, ours)
        try:
            with theirs:
                forkserver.send(self._ctl, "arm", [theirs.fileno()], id=wid, policy=policy.to_dict(),
                                identity=[identity.name, identity.uid, identity.gid], procs=cg.procs_files,
                                layers=layers, gpu=grant.to_dict() if grant else None)
            reply = self._await(wid, ("armed",)) if wait else {"op": "armed", "pid": None}
        except OSError as e:
            reply = _failed(RtdError(Code.E_CONTAINMENT, f"zygote: {e}"))
        except RtdError as e:
            reply = _failed(e)
        if reply["op"] != "armed":
            _discard(spare)
            raise channel.error_of(reply["error"], "zygote report")
        return dataclasses.replace(spare, pid=reply["pid"])

    def _hand_job(self, spare: Spare, target: str, args, sock: socket.socket) -> dict:
        """Send the waiting worker its job and wait for its word over the go socket that it
        runs it; {"op": "armed"/"spawned", "pid": ...} or a "failed" report."""
        try:
            with spare.go:
                contain.send_job(spare.go, target, list(args), sock.fileno())
                spare.go.settimeout(30)
                ready = contain.receive_ready(spare.go)
        except OSError:
            ready = False
        except RtdError as e:   # the worker said something else: refused like a failed step
            return _failed(e)
        if not ready:   # the worker is gone: the zygote says why
            return self._await(spare.id, ("spawned",))
        return {"op": "armed", "pid": spare.pid} if spare.pid else self._await(spare.id, ("armed", "spawned"))

    def _await(self, wid: str, ops: tuple) -> dict:
        """The zygote's next report about `wid` among `ops` (caller holds _spawn_lock);
        reports about other ids are late answers to abandoned requests."""
        deadline = time.monotonic() + 30
        try:
            while True:
                reply = self._replies.get(timeout=max(0.0, deadline - time.monotonic()))
                if reply.get("id") in (wid, None) and reply["op"] in ops + ("failed",):   # no id: the zygote failed
                    return reply
        except queue.Empty:
            return _failed(RtdError(Code.E_CONTAINMENT, "zygote: no answer in 30 s"))

    def _read_loop(self):
        ended = RtdError(Code.E_CONTAINMENT, "zygote exited")
        while True:
            try:
                msg = _report(channel.receive_head(self._ctl, Kind.ZYGOTE, "zygote report"))
            except (EOFError, OSError):
                break
            except RtdError as e:   # it no longer accounts for its workers: end it, and them with it
                log.error("zygote %d: %s; stopping it", self.pid, e)
                ended = e
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
                break
            if msg["op"] == "exit":
                handle = self._handles.pop(msg["id"], None)
                if handle:
                    handle._finish(msg["code"], msg["signal"], msg["cpu_s"])
                else:
                    self._spare_died(msg["id"])
                continue
            if msg["op"] == "spawned" and msg["id"] in self._handles:
                self._handles[msg["id"]]._reported(msg["steps"])
            self._replies.put(msg)
        for handle in list(self._handles.values()):   # zygote gone: its workers died with it
            handle.kill()
            handle._finish(None, signal.SIGKILL, 0.0)
        self._replies.put(_failed(ended))

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
    spare.go.close()
    try:
        spare.cgroup.kill()
        spare.cgroup.remove()
    except RtdError as e:
        log.error("spare %s: %s", spare.id, e)
