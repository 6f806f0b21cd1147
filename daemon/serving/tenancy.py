"""One tenant's share of the daemon: its models (each with its one owner), the slots that
bound how many of its requests are in its workers at once, its instances' memory and
eviction, and the services its serving objects are built with (services.py).

A request takes one of the tenant's `max_concurrency` slots before it is sent to a worker
and gives it back when the worker answers — not when the client stops waiting — so a
storm of short deadlines never puts more work in the workers than the limit (scheduler.py).
When starting an instance would pass the tenant's memory limit or its pids limit (each
instance's helper, worker and kernel threads; the zygote's spare), the least recently used
idle instances of its other models are evicted first (each instance's resident size and
pids are measured after it loaded and warmed up); they restart on their next request.
"""
import asyncio
import time

from rtd.daemon.config import TenantConfig
from rtd.daemon.observe.metrics import Timing
from rtd.daemon.serving.ensemble import EnsembleVersion
from rtd.daemon.serving.lifecycle import ManagedModel, ModelVersion
from rtd.daemon.serving.instances import size
from rtd.daemon.serving.scheduler import Answer, InferRequest, Slots
from rtd.daemon.serving.services import TenantServices
from rtd.daemon.serving.stages import StagedVersion, stage_count
from rtd.errors import Code, RtdError

SPARE_PIDS = 2   # the confined spare the zygote keeps armed for each tenant: its helper and its worker
SETTLE_S = 2.0   # how long a start waits for evicted workers' pids to be given back


def make_version(owner: ManagedModel, package, held, services: TenantServices):
    """What a verified package serves as: an ensemble over the tenant's models, one model cut
    into stages (config parameter rtd_stages), or one model in its own workers."""
    if package.is_ensemble:
        return EnsembleVersion(owner, package, held, services)
    if stage_count(package.config) > 1:
        return StagedVersion(owner, package, held, services)
    return ModelVersion(owner, package, held, services)


class Tenancy:
    def __init__(self, tenant: TenantConfig, limits, policy, events, metrics, spawn):
        """`spawn(socket)`: a confined worker of this tenant (blocking)."""
        self.tenant, self.policy = tenant, policy
        self.models: dict[str, ManagedModel] = {}
        self.load_lock = asyncio.Lock()
        self.room = asyncio.Lock()   # making room for an instance and counting it, one start at a time
        self.services = TenantServices(tenant.id, limits, policy.limits, events, metrics, spawn, self.make_room,
                                       Slots(limits.max_concurrency), self.models.get)

    def model(self, name: str) -> ManagedModel:
        """The owner of `name`, made if the tenant has none yet (the caller loads it)."""
        model = self.models.get(name)
        if model is None:
            model = self.models[name] = ManagedModel(name, self.services, make_version)
        return model

    def versions(self) -> list[ModelVersion]:
        return [v for m in self.models.values() for v in (m.serving, m.loading) if v is not None]

    # -- memory and pids ----------------------------------------------------------------------
    def resident(self) -> int:
        return sum(i.resident or v.estimate() for v in self.versions() for i in v.instances if i.ending is None)

    def pids(self) -> int:
        """Pids the tenant's node holds: its instances' (as measured, or estimated until then)
        and the spare the zygote keeps armed for it."""
        return SPARE_PIDS + sum(max(i.pids, v.pids_estimate()) for v in self.versions() for i in v.instances
                                if i.ending is None)

    def _short(self, need_bytes: int, need_pids: int) -> list[str]:
        """The limits a new instance needing `need_bytes` and `need_pids` would pass, said with their values."""
        limits, short = self.policy.limits, []
        if self.resident() + need_bytes > limits.memory_bytes:
            short.append(f"memory: {size(self.resident())} in use + {size(need_bytes)} needed exceed limits.memory_bytes "
                         f"{limits.memory_bytes} ({size(limits.memory_bytes)}; rtd serve --memory-bytes)")
        if self.pids() + need_pids > limits.pids:
            short.append(f"pids: {self.pids()} in use + {need_pids} needed exceed limits.pids {limits.pids}")
        return short

    async def _settle(self, evicted: list, need_pids: int) -> None:
        """Until the kernel's count has room too: a killed worker's pids stay charged to the
        tenant's node until it and its helper are reaped, and a fork before that is refused.
        Bounded: past SETTLE_S the start goes ahead, and a refused fork says so itself."""
        deadline = time.monotonic() + SETTLE_S
        while time.monotonic() < deadline:
            usage = evicted[0].handle.tenant_usage() if evicted[0].handle is not None else {}
            if usage.get("pids") is None or usage["pids"] + need_pids <= self.policy.limits.pids:
                return
            await asyncio.sleep(0.01)

    async def make_room(self, need_bytes: int, need_pids: int, keep: ModelVersion, claim) -> None:
        """Evict idle instances (least recently used first, never of `keep`) until a new one
        needing `need_bytes` of memory and `need_pids` processes and threads fits every limit
        of the tenant's policy — whichever binds; refuse, naming the limits, if they cannot.
        `claim()` then counts the new instance, under the same lock: two instances starting at
        once (a version's instance group) never both take the room that one eviction made."""
        async with self.room:
            await self._make_room(need_bytes, need_pids, keep)
            claim()

    async def _make_room(self, need_bytes: int, need_pids: int, keep: ModelVersion) -> None:
        if not self._short(need_bytes, need_pids):
            return
        idle = sorted(((i.last_used, v, i) for v in self.versions() if v is not keep
                       for i in v.instances if i.live and i.in_flight == 0), key=lambda t: t[0])
        evicted = []
        for _, version, instance in idle:
            version.evict(instance)
            evicted.append(instance)
            if not self._short(need_bytes, need_pids):
                await self._settle(evicted, need_pids)
                return
        short = self._short(need_bytes, need_pids)
        raise RtdError(Code.E_RESOURCE_EXHAUSTED, f"{'; '.join(short)}, busy instances holding the rest; "
                                                  "raise it in the tenant's policy, or unload a model")

    # -- inference -----------------------------------------------------------------------------
    async def infer(self, request: InferRequest, timing: Timing) -> tuple[ModelVersion, Answer]:
        """Run one request; (the version that ran it, its answer). Its headers, where the
        transport read them, are checked against the version's signature first; `timing`
        follows it through Triton's phases, and it counts as pending in its version's series
        until it starts computing."""
        model = self.models.get(request.model)
        if model is None:
            raise RtdError(Code.E_MODEL_NOT_FOUND, repr(request.model))
        serving = model.version_for(request.version)
        if request.inputs is not None:
            serving.signature.check(request.model, request.inputs, request.outputs)
        timing.queue_in(self.services.metrics.track(self.tenant.id, request.model, serving.version_dir))
        serving.users += 1   # the version serves this request even if a newer one takes over meanwhile
        try:
            return serving, await serving.scheduler.submit(request, timing)
        finally:
            serving.users -= 1

    def view(self) -> dict:
        limits = self.services.limits
        return {"tenant": self.tenant.id, "models": {n: m.view() for n, m in sorted(self.models.items())},
                "memory_limit_bytes": self.policy.limits.memory_bytes, "resident_bytes": self.resident(),
                "pids": self.pids(), "pids_limit": self.policy.limits.pids,
                "in_workers": sum(i.in_flight for v in self.versions() for i in v.instances),
                "max_concurrency": limits.max_concurrency}
