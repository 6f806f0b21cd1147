"""One instance of one model version: a confined worker process forked by the zygote, the
channel to it, and the resident memory it was measured at after loading.

An instance is started, serves pipelined requests, and ends — stopped by its owner
(unload, eviction, replacement) or lost (crash, confinement kill, hang). A request that
gets no answer within the operator's `request_timeout_s` marks the instance hung and
kills it; a client's deadline never does (the owner keeps the request's slot until the
worker answers and drops the result). How an instance ended is classified once, from the
zygote's exit report, for the owner to count: a crash, a request-caused resource kill
(the memory layer, or the GPU memory layer's watcher), a containment kill (a GPU worker's
seccomp filter: the filter too tight for the driver, not the model), a hang, or a stop of ours.
A resource kill is told as E_RESOURCE_EXHAUSTED naming the layer, the limit's key in the
tenant's policy, its value and how to raise it (`resource_limit`).
"""
import asyncio
import collections
import enum
import socket
import time

from rtd import wire
from rtd.daemon.serving.channel import WorkerChannel
from rtd.errors import Code, RtdError
from rtd.signature import Signature

WORKER_ENTRY = "rtd.daemon.worker.main:serve"
RESOURCE_LAYERS = ("memory", "gpu")   # limits a request can run into: its doing, not the model's
EXIT_GRACE_S = 0.5   # how long a worker whose socket closed has to end by itself before it is killed
# the limit each resource layer enforces, by its key in the tenant's policy, and what else sets it
LIMIT_OF_LAYER = {"memory": ("memory_bytes", " or rtd serve --memory-bytes"), "gpu": ("gpu_memory_bytes", "")}


def size(nbytes: int) -> str:
    return f"{nbytes / 2**30:g} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:g} MiB"


def resource_limit(layer: str, limits) -> str:
    """The limit a kill by `layer` ran into, named with its value and how to raise it."""
    key, flag = LIMIT_OF_LAYER[layer]
    value = getattr(limits, key)
    return f"the policy's limits.{key} {value} ({size(value)}, the tenant's workers together); raise it in the tenant's policy{flag}"


class Ending(enum.Enum):
    STOPPED = "stopped"        # by us: unload, eviction, replacement, shutdown
    CRASHED = "crashed"        # the worker died on its own, or by seccomp or another layer
    RESOURCE = "resource"      # killed by its memory or GPU memory limit while serving: the request's doing
    CONTAINMENT = "containment"   # a GPU worker killed by its seccomp filter: a call the filter does not know
    HUNG = "hung"              # no answer within request_timeout_s


class Instance:
    """A worker process serving one model version; `index` is its place in the instance group,
    `limits` its tenant's sandbox limits (what a resource kill is told it ran into)."""

    def __init__(self, index: int, on_end, limits):
        self.index, self.on_end, self.limits = index, on_end, limits
        self.handle, self.channel = None, None
        self.resident = 0                     # bytes charged to its cgroup leaf after load + warm-up
        self.pids = 0                         # processes and threads of its leaf then (its helper included)
        self.started = self.last_used = time.monotonic()
        self.ending: Ending | None = None
        self.reason, self.layer = "", None
        self.device = "cpu"                   # "cuda" once started for a tenant that names GPUs
        self.ended = asyncio.Event()          # set once the ending is known (classified)
        self.queue: collections.deque = collections.deque()   # requests sent and not answered, in order
        self.watchdog = None                  # the hang timer: at most one, checking the head of the queue
        self.head_since = 0.0                 # time.monotonic() when the request at the head became it
        self.loaded: dict = {}                # the worker's LOAD answer

    @property
    def live(self) -> bool:
        return self.channel is not None and self.ending is None

    @property
    def in_flight(self) -> int:
        return self.channel.in_flight if self.channel is not None else 0

    async def start(self, spawn, model_fd: int, load_timeout: float, external: dict[str, int], serve_as: dict) -> Signature:
        """Spawn the worker (blocking zygote call, run off the loop), send the model, the
        signed files its tensors' external data may name ({name: sealed memfd}) and what it
        serves the model as (`serve_as`: name, version, max_batch, max_message_bytes,
        max_elements, threads — the tenant's whole CPU cores — and device, "cuda" when the
        tenant's policy names GPUs), wait for its signature, parsed here once; raises RtdError
        and leaves nothing running on failure."""
        self.device = serve_as.get("device", "cpu")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            self.handle = await asyncio.get_running_loop().run_in_executor(None, spawn, theirs)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.channel = WorkerChannel(ours, self._lost)
        try:
            reply = await asyncio.wait_for(self.channel.request(wire.Kind.LOAD, {"external": list(external), **serve_as},
                                                                fds=[model_fd, *external.values()]), load_timeout)
        except asyncio.TimeoutError:
            self.stop(Ending.HUNG, f"no answer to LOAD within {load_timeout:g} s")
            raise RtdError(Code.E_DEADLINE, f"the worker did not load the model within {load_timeout:g} s") from None
        except BaseException as e:
            if self.ending is None:
                self.stop(Ending.STOPPED, "load refused")
            if isinstance(e, RtdError) and e.code in (Code.E_WORKER_CRASHED, Code.E_WORKER_PROTOCOL):
                reason = await self.exit_reason()
                if self.ending == Ending.RESOURCE:   # the model itself needs more than the limit: say which, and its value
                    raise RtdError(Code.E_RESOURCE_EXHAUSTED, f"{self.layer}: loading the model, its worker was killed at "
                                                              f"{resource_limit(self.layer, self.limits)}") from None
                raise RtdError(e.code, f"{e.detail}; {reason}") from None
            raise
        try:
            signature = Signature.parse(reply.head)
        except RtdError as e:
            self.stop(Ending.CRASHED, e.detail)
            raise
        usage = self.handle.usage()
        self.resident, self.pids = usage.get("memory_bytes") or 0, usage.get("pids") or 0
        self.last_used = time.monotonic()
        self.loaded = reply.head   # what else the LOAD answer said (a first stage's cut)
        return signature

    def send(self, kind: wire.Kind, head: dict, tensors: dict, request_timeout: float, on_done) -> asyncio.Future:
        """Pipeline one request; its future resolves to the reply frame, and `on_done(answered)`
        runs when the worker is through with it, whether or not anyone still waits. A request
        the worker has been on (it answers in order: since the one before it was answered)
        for longer than `request_timeout` means the instance is hung: it is killed."""
        self.last_used = time.monotonic()
        token = object()

        def done(answered: bool) -> None:
            if self.queue and self.queue[0] is token:
                self.queue.popleft()
                self._watch(request_timeout)
            on_done(answered)
        future = self.channel.request(kind, head, tensors, on_done=done)   # raises before anything is queued
        self.queue.append(token)
        if len(self.queue) == 1:
            self._watch(request_timeout)
        return future

    def _watch(self, request_timeout: float) -> None:
        """The request at the head of the queue changed: it is timed from now. The timer is
        lazy — armed once, re-armed from `_check` for what is left — so a request costs no
        timer of its own."""
        self.head_since = time.monotonic()
        if self.watchdog is None and self.queue and self.ending is None:
            self.watchdog = asyncio.get_running_loop().call_later(request_timeout, self._check, request_timeout)

    def _check(self, request_timeout: float) -> None:
        self.watchdog = None
        if not self.queue or self.ending is not None:
            return
        waited = time.monotonic() - self.head_since
        if waited >= request_timeout:
            self._hung(request_timeout)
        else:
            self.watchdog = asyncio.get_running_loop().call_later(request_timeout - waited, self._check, request_timeout)

    def _hung(self, after: float) -> None:
        if self.ending is None:
            self.stop(Ending.HUNG, f"no answer within request_timeout_s ({after:g} s)")

    def stop(self, ending: Ending, reason: str) -> None:
        """End the instance now (idempotent): its requests fail, its process is killed."""
        if self.ending is not None:
            return
        self.ending, self.reason = ending, reason
        if self.watchdog is not None:
            self.watchdog.cancel()
        if self.handle is not None:
            self.handle.kill()
        if self.channel is not None:
            self.channel.close()

    def _lost(self, error: RtdError) -> None:
        if self.ending is None:    # not our doing: the exit report says what it was
            self.ending, self.reason = Ending.CRASHED, error.detail
            asyncio.get_running_loop().create_task(self._classify())
        else:
            self.ended.set()
            self.on_end(self)

    def _ended_by_itself(self):
        """The exit status of a worker whose socket closed: its own end if it comes within
        EXIT_GRACE_S (a worker's socket can close before its exit signal is final, and our kill
        would then stand in its place: a seccomp kill read as ours), else our kill's."""
        status = self.handle.wait(EXIT_GRACE_S)
        if status is None:
            self.handle.kill()
            status = self.handle.wait(2.0)
        return status

    async def _classify(self) -> None:
        status = await asyncio.get_running_loop().run_in_executor(None, self._ended_by_itself)
        if status is not None:
            self.reason, self.layer = f"{status.layer or 'crash'}: {status.reason}", status.layer
            if status.layer in RESOURCE_LAYERS:
                self.ending = Ending.RESOURCE
            elif status.layer == "seccomp" and self.device == "cuda":
                # the GPU filter names and refuses (EPERM) every call it knows to be harmless; a kill is a
                # call it does not know, made by the driver or CUDA far likelier than by the model
                self.ending = Ending.CONTAINMENT
                self.reason = ("seccomp: SIGSYS: a call outside the GPU filter's lists (not the model's crash; "
                               "unsafe_gpu_audit names it)")
        self.ended.set()
        self.on_end(self)

    async def exit_reason(self) -> str:
        await self.ended.wait()
        return self.reason

    async def failure(self) -> RtdError:
        """What a request that was in flight on this instance when it ended is told."""
        await self.ended.wait()
        if self.ending == Ending.STOPPED:
            return RtdError(Code.E_MODEL_UNAVAILABLE, f"the instance was stopped ({self.reason})")
        if self.ending == Ending.CONTAINMENT:
            return RtdError(Code.E_CONTAINMENT, f"the model's worker ended ({self.reason}); it is being restarted")
        if self.ending == Ending.RESOURCE:
            return RtdError(Code.E_RESOURCE_EXHAUSTED, f"{self.layer}: the request's worker was killed at "
                                                       f"{resource_limit(self.layer, self.limits)}")
        code = Code.E_SANDBOX_KILLED if self.layer else Code.E_WORKER_CRASHED
        return RtdError(code, f"the model's worker ended ({self.reason}); it is being restarted")

    def view(self) -> dict:
        usage = self.handle.usage() if self.live else {}
        return {"index": self.index, "pid": self.handle.pid if self.live else None, "live": self.live,
                "in_flight": self.in_flight, "resident_bytes": self.resident, "pids": usage.get("pids"),
                "memory_bytes": usage.get("memory_bytes"), "idle_s": round(time.monotonic() - self.last_used, 1),
                "ending": self.ending.value if self.ending else None, "reason": self.reason,
                "layers": dict(self.handle.layers) if self.handle is not None else {}}
