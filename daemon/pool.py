"""One confined worker per tenant, forked from the sandbox zygote with the tenant's policy.

A worker's death (crash, seccomp kill, OOM, budget kill) fails only its own tenant's
in-flight requests with UNAVAILABLE; the pool's monitor thread restarts it with
exponential backoff and reloads its models; readiness follows. A model whose load or
request kills its worker `crash_limit` times in a row is marked failed (E_MODEL_FAILED)
and is no longer reloaded, so a poisonous model cannot keep a tenant's worker looping.
"""
import dataclasses
import itertools
import os
import socket
import threading
import time

from rtd.daemon import frames
from rtd.daemon.config import Limits, TenantConfig
from rtd.daemon.frames import Kind
from rtd.errors import Code, RtdError
from rtd.sandbox import TenantIdentity, Zygote, load_policy

WORKER_ENTRY = "rtd.daemon.worker:serve"


@dataclasses.dataclass
class ModelSlot:
    """A model the tenant's worker should hold: the verified package and what the worker said."""
    package: object            # rtd.loader.VerifiedPackage (owns the sealed model memfd)
    signature: dict | None = None  # {"inputs": [...], "outputs": [...]} once loaded
    ready: bool = False
    crashes: int = 0
    failed: str = ""           # why it is marked failed, "" otherwise


class TenantWorker:
    """The worker process of one tenant and the models it must hold."""

    def __init__(self, tenant: TenantConfig, zygote: Zygote, limits: Limits, events):
        self.tenant, self.zygote, self.limits, self.events = tenant, zygote, limits, events
        self.policy = load_policy(tenant.policy or None)
        self.models: dict[str, ModelSlot] = {}
        self.lock = threading.Lock()        # one frame exchange at a time on the socket
        self.handle = None
        self.sock = None
        self.arena, self.peer = frames.Arena(), frames.PeerArena()
        self.ids = itertools.count(1)
        self.restarts = 0
        self.last_exit = ""
        self.next_start = 0.0
        self.backoff = limits.restart_backoff_s

    # -- process life cycle -------------------------------------------------------------
    def alive(self) -> bool:
        return self.handle is not None and self.handle.alive()

    def identity(self) -> TenantIdentity:
        return TenantIdentity(name=self.tenant.id, uid=self.tenant.uid, gid=self.tenant.gid)

    def _start(self) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.handle = self.zygote.spawn(WORKER_ENTRY, policy=self.policy, identity=self.identity(), sock=child, args=())
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        self.sock = parent
        self.arena.close()
        self.arena, self.peer = frames.Arena(), frames.PeerArena()  # the new worker knows neither

    def _died(self, during: str | None) -> RtdError:
        """Account for a dead worker; returns the error its in-flight request gets."""
        status = None
        if self.handle is not None:  # let the zygote report how it died before making sure
            status = self.handle.wait(timeout=0.5)
            if status is None:
                self.handle.kill()
                status = self.handle.wait(timeout=5)
        if self.sock is not None:
            self.sock.close()
        self.handle, self.sock = None, None
        layer = getattr(status, "layer", None)
        reason = getattr(status, "reason", "") or "worker exited"
        self.last_exit = f"{layer or 'crash'}: {reason}"
        self.events.worker_died(self.tenant.id, layer or "crash")
        for slot in self.models.values():
            slot.ready = False
        if during in self.models:
            slot = self.models[during]
            slot.crashes += 1
            if slot.crashes >= self.limits.crash_limit:
                slot.failed = f"killed its worker {slot.crashes} times in a row (last: {self.last_exit})"
        self.next_start = time.monotonic() + self.backoff
        self.backoff = min(self.backoff * 2, self.limits.restart_backoff_max_s)
        code = Code.E_SANDBOX_KILLED if layer else Code.E_WORKER_CRASHED
        return RtdError(code, f"tenant {self.tenant.id}'s worker died ({self.last_exit}); it is being restarted")

    def _exchange(self, kind: Kind, head: dict, tensors=None, fds=None, timeout=None, model=None) -> frames.Frame:
        """Send one frame and wait for its reply; any transport failure kills the worker."""
        request_id = next(self.ids)
        try:
            self.sock.settimeout(timeout)
            released = self.peer.take_released()
            frames.send(self.sock, kind, request_id, dict(head, released=released) if released else head,
                        tensors, fds, arena=self.arena)
            reply = frames.recv(self.sock, self.peer, lease=True)
            self.arena.reclaim()  # the worker has replied: it is done with this request's inputs
        except socket.timeout:
            self._died(model)
            raise RtdError(Code.E_DEADLINE, "the worker did not answer in time and was restarted") from None
        except (EOFError, OSError):
            raise self._died(model) from None
        except RtdError as e:
            if e.code == Code.E_WORKER_PROTOCOL:
                self._died(model)
            raise
        for fd in reply.fds:
            os.close(fd)
        if reply.request_id != request_id or reply.kind not in (Kind.OK, Kind.ERROR):
            self._died(model)
            raise RtdError(Code.E_WORKER_PROTOCOL, "reply out of sequence")
        if reply.kind == Kind.ERROR:
            code = Code.__members__.get(str(reply.head.get("code")), Code.E_INTERNAL)
            raise RtdError(code, str(reply.head.get("detail", ""))[:300])
        return reply

    def _load_into_worker(self, name: str, slot: ModelSlot, restoring: bool = True) -> None:
        reply = self._exchange(Kind.LOAD, {"key": name}, fds=[slot.package.model.fd],
                               timeout=self.limits.load_timeout_s, model=name if restoring else None)
        inputs, outputs = reply.head.get("inputs"), reply.head.get("outputs")
        if not isinstance(inputs, list) or not isinstance(outputs, list):
            raise RtdError(Code.E_WORKER_PROTOCOL, "LOAD reply without a signature")
        slot.signature, slot.ready = {"inputs": inputs, "outputs": outputs}, True

    def ensure_started(self) -> None:
        """(Re)start the worker if needed and reload every model not marked failed. Lock held."""
        if self.alive():
            return
        if self.sock is not None:
            self._died(None)
        wait = self.next_start - time.monotonic()
        if wait > 0:
            raise RtdError(Code.E_WORKER_CRASHED, f"worker restarting in {wait:.1f}s ({self.last_exit})")
        self.restarts += 1 if self.last_exit else 0
        self._start()
        for name, slot in list(self.models.items()):
            if slot.failed:
                continue
            try:
                self._load_into_worker(name, slot)
            except RtdError:
                if not self.alive():
                    return  # that model took the worker down; the monitor tries again later
        self.backoff = self.limits.restart_backoff_s

    # -- what the supervisor calls --------------------------------------------------------
    def load(self, name: str, package) -> dict:
        with self.lock:
            self.ensure_started()
            old = self.models.get(name)
            slot = ModelSlot(package)
            # a refused or fatal new load leaves the old version in place (the worker only
            # replaces a key on success; after a crash the restart reloads the old one)
            self._load_into_worker(name, slot, restoring=False)
            self.models[name] = slot
            if old is not None and old.package is not package:
                old.package.close()
            return slot.signature

    def unload(self, name: str) -> None:
        with self.lock:
            slot = self.models.pop(name, None)
            if slot is None:
                return
            try:
                if self.alive():
                    self._exchange(Kind.UNLOAD, {"key": name}, timeout=self.limits.load_timeout_s)
            finally:
                slot.package.close()

    def infer(self, name: str, tensors: dict, outputs: list | None, deadline: float) -> dict:
        with self.lock:
            slot = self.models.get(name)
            if slot is None:
                raise RtdError(Code.E_MODEL_NOT_FOUND, name)
            if slot.failed:
                raise RtdError(Code.E_MODEL_FAILED, slot.failed)
            self.ensure_started()
            if not slot.ready:
                raise RtdError(Code.E_MODEL_UNAVAILABLE, f"{name} is reloading")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RtdError(Code.E_DEADLINE, "expired while queued")
            reply = self._exchange(Kind.INFER, {"key": name, "outputs": outputs}, tensors, timeout=remaining, model=name)
            slot.crashes = 0
            return reply.tensors

    def echo(self, tensors: dict, timeout: float) -> dict:
        with self.lock:
            self.ensure_started()
            return self._exchange(Kind.ECHO, {}, tensors, timeout=timeout).tensors

    def monitor(self) -> None:
        """Called periodically: restart a dead worker that still has models to serve."""
        if not self.models or not self.lock.acquire(blocking=False):
            return
        try:
            if not self.alive() and time.monotonic() >= self.next_start:
                try:
                    self.ensure_started()
                except RtdError:
                    pass  # counted in _died; retried on the next tick
        finally:
            self.lock.release()

    def kill(self) -> None:
        with self.lock:
            if self.handle is not None:
                self.handle.kill()
                self.handle.wait(timeout=5)
            if self.sock is not None:
                self.sock.close()
            self.handle = self.sock = None

    def view(self) -> dict:
        usage = self.handle.usage() if self.alive() else {}
        return {"tenant": self.tenant.id, "alive": self.alive(), "pid": self.handle.pid if self.alive() else None,
                "restarts": self.restarts,
                "last_exit": self.last_exit, "layers": dict(self.handle.layers) if self.alive() else {},
                "usage": usage, "models": {n: {"ready": s.ready, "failed": s.failed} for n, s in self.models.items()}}


class Pool:
    """All tenants' workers plus the monitor thread that restarts dead ones."""

    def __init__(self, zygote: Zygote, tenants, limits: Limits, events, tick_s: float = 0.2):
        self.workers = {t.id: TenantWorker(t, zygote, limits, events) for t in tenants}
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(tick_s,), name="rtd-pool-monitor", daemon=True)

    def start(self) -> None:
        # A confined spare per tenant, armed now, makes each tenant's first worker start as
        # fast as a restart. A spare that cannot be armed is no refusal: the real spawn
        # applies (and reports) the same policy when the tenant first needs its worker.
        for worker in self.workers.values():
            try:
                worker.zygote.prepare(worker.policy, worker.identity())
            except RtdError:
                pass
        self.thread.start()

    def _run(self, tick_s: float) -> None:
        while not self.stopping.wait(tick_s):
            for worker in self.workers.values():
                worker.monitor()

    def close(self) -> None:
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join(timeout=5)
        for worker in self.workers.values():
            worker.kill()
            for slot in worker.models.values():
                slot.package.close()
