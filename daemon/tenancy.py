"""One tenant's share of the daemon: its models (each with its one owner), the slots that
bound how many of its requests are in its workers at once, its instances' memory and
eviction, and how its workers are spawned (its policy, uid and cgroup).

A request takes one of the tenant's `max_concurrency` slots before it is sent to a worker
and gives it back when the worker answers — not when the client stops waiting — so a
storm of short deadlines never puts more work in the workers than the limit. When
starting an instance would pass the tenant's memory limit, the least recently used idle
instances of its other models are evicted first (each instance's resident size is
measured after it loaded and warmed up); they restart on their next request.
"""
import asyncio
import math
import time

from rtd import dtypes, wire
from rtd.daemon.channel import Lost
from rtd.daemon.config import Limits, TenantConfig
from rtd.daemon.instances import WORKER_ENTRY
from rtd.daemon.lifecycle import ManagedModel, ModelVersion
from rtd.daemon.metrics import Timing
from rtd.dtypes import kserve_name
from rtd.errors import Code, RtdError
from rtd.sandbox import TenantIdentity, load_policy


def check_inputs(name: str, signature: dict, inputs: dict, outputs: list | None) -> None:
    """The one check of a request against the model's signature (names, dtypes, shapes)."""
    specs = {s["name"]: s for s in signature["inputs"]}
    missing, unknown = sorted(set(specs) - set(inputs)), sorted(set(inputs) - set(specs))
    if missing or unknown:
        raise RtdError(Code.E_INPUT_INVALID, f"{name}: missing inputs {missing}, unknown inputs {unknown}")
    for key, array in inputs.items():
        spec = specs[key]
        want, got = spec["dtype"], dtypes.of_numpy(array.dtype)
        if want and (got is None or got.wire != want):
            raise RtdError(Code.E_INPUT_INVALID, f"input {key!r} is {kserve_name(got.wire if got else '') or array.dtype}, "
                                                 f"the model takes {kserve_name(want)}")
        shape = spec["shape"]
        if shape is not None and (len(shape) != array.ndim or any(d >= 0 and d != a for d, a in zip(shape, array.shape))):
            raise RtdError(Code.E_INPUT_INVALID, f"input {key!r} has shape {list(array.shape)}, the model takes {shape}")
    known = {s["name"] for s in signature["outputs"]}
    for out in outputs or ():
        if out not in known:
            raise RtdError(Code.E_INPUT_INVALID, f"{name} has no output {out!r}")


class Tenancy:
    def __init__(self, supervisor, tenant: TenantConfig):
        self.supervisor, self.tenant = supervisor, tenant
        self.limits: Limits = supervisor.config.limits
        self.policy = load_policy(tenant.policy or None)
        self.identity = TenantIdentity(name=tenant.id, uid=tenant.uid, gid=tenant.gid)
        self.models: dict[str, ManagedModel] = {}
        self.slots = asyncio.Semaphore(self.limits.max_concurrency)
        self.load_lock = asyncio.Lock()

    def spawn(self, sock):
        """Blocking: a confined worker for this tenant (called off the event loop); the NVML
        watcher polices it from here on when the tenant names GPUs."""
        handle = self.supervisor.zygote.spawn(WORKER_ENTRY, policy=self.policy, identity=self.identity, sock=sock, args=())
        if self.policy.limits.gpu_devices and self.supervisor.gpu_watch is not None:
            self.supervisor.gpu_watch.watch(self.tenant.id, handle)
        return handle

    def versions(self) -> list[ModelVersion]:
        return [v for m in self.models.values() for v in (m.serving, m.loading) if v is not None]

    # -- memory -------------------------------------------------------------------------------
    def resident(self) -> int:
        return sum(i.resident or v.estimate() for v in self.versions() for i in v.instances if i.ending is None)

    async def make_room(self, need: int, keep: ModelVersion) -> None:
        """Evict idle instances (least recently used first, never of `keep`) until `need`
        more bytes fit the tenant's memory limit; refuse if they cannot."""
        limit = self.policy.limits.memory_bytes
        if self.resident() + need <= limit:
            return
        idle = sorted(((i.last_used, v, i) for v in self.versions() if v is not keep
                       for i in v.instances if i.live and i.in_flight == 0), key=lambda t: t[0])
        for _, version, instance in idle:
            version.evict(instance)
            if self.resident() + need <= limit:
                return
        raise RtdError(Code.E_RESOURCE_EXHAUSTED, f"tenant memory: {self.resident()} bytes held by busy instances + "
                                                  f"{need} needed exceed limits.memory_bytes {limit}")

    # -- inference -----------------------------------------------------------------------------
    async def infer(self, name: str, version: str, inputs: dict, outputs: list | None,
                    deadline: float, timing: Timing, trace: list | None = None) -> tuple[ModelVersion, dict]:
        """Run one request; (the version that ran it, {output name: ndarray}). `timing` follows
        it through Triton's phases, and it counts as pending in its version's series until it
        starts computing. With a `trace` list, the worker times the run step by step and its
        Chrome trace events are added to the list (never batched with others)."""
        model = self.models.get(name)
        if model is None:
            raise RtdError(Code.E_MODEL_NOT_FOUND, repr(name))
        serving = model.version_for(version)
        check_inputs(name, serving.signature, inputs, outputs)
        timing.queue_in(self.supervisor.metrics.track(self.tenant.id, name, serving.version_dir))
        serving.users += 1   # the version serves this request even if a newer one takes over meanwhile
        try:
            if serving.batcher is not None and trace is None:
                return serving, await serving.batcher.submit(inputs, outputs, deadline, timing)
            return serving, await self.execute(serving, inputs, outputs, deadline, timing, trace)
        finally:
            serving.users -= 1

    async def execute(self, serving: ModelVersion, inputs: dict, outputs: list | None, deadline: float,
                      timing: Timing, trace: list | None = None) -> dict:
        """One execution in a worker, holding a slot from before it is sent until it is answered.
        Waiting for a slot or an instance ends at the client's deadline (math.inf: none) or
        after request_timeout_s; waiting for the answer only at the client's deadline (a worker
        that takes longer than request_timeout_s is killed as hung)."""
        queued_until = min(deadline, time.monotonic() + self.limits.request_timeout_s)
        if self.slots.locked():
            try:
                async with asyncio.timeout(max(0.0, queued_until - time.monotonic())):
                    await self.slots.acquire()
            except TimeoutError:
                raise RtdError(Code.E_DEADLINE, "expired while queued for a worker") from None
        else:
            await self.slots.acquire()   # a free slot: taken at once
        def finished(answered: bool) -> None:   # when the worker is through, not when the caller gives up
            self.slots.release()
            if answered:
                serving.answered()
        try:
            instance = await serving.instance(queued_until)
            timing.computing()   # copying its inputs into the worker's arena is compute input
            head = {**({"outputs": outputs} if outputs else {}), **({"profile": True} if trace is not None else {})}
            future = instance.send(wire.Kind.INFER, head, inputs, self.limits.request_timeout_s, finished)
            timing.input_end = time.monotonic()
        except BaseException:
            self.slots.release()
            raise
        try:
            if deadline == math.inf:
                reply = await future
            else:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    reply = await future
        except TimeoutError:   # the worker goes on; its slot is held until it answers
            raise RtdError(Code.E_DEADLINE, "the deadline passed while the model ran") from None
        except Lost:
            raise await instance.failure() from None
        timing.output_start = time.monotonic()
        if trace is not None:
            events = reply.head.get("trace")   # the head's size was bounded by the channel's reader
            if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
                raise RtdError(Code.E_WORKER_PROTOCOL, "a profiled run's reply without its trace")
            trace.extend(events)
        return reply.tensors

    def view(self) -> dict:
        return {"tenant": self.tenant.id, "models": {n: m.view() for n, m in sorted(self.models.items())},
                "memory_limit_bytes": self.policy.limits.memory_bytes, "resident_bytes": self.resident(),
                "in_workers": sum(i.in_flight for v in self.versions() for i in v.instances),
                "max_concurrency": self.limits.max_concurrency, "budgets": self.supervisor.ledger.usage(self.tenant.id)}
