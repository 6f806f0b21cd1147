"""One tenant's share of the daemon: its models (each with its one owner), the slots that
bound how many of its requests are in its workers at once, its instances' memory and
eviction, and the services its serving objects are built with (services.py).

A request takes one of the tenant's `max_concurrency` slots before it is sent to a worker
and gives it back when the worker answers — not when the client stops waiting — so a
storm of short deadlines never puts more work in the workers than the limit (scheduler.py).
When starting an instance would pass the tenant's memory limit, the least recently used
idle instances of its other models are evicted first (each instance's resident size is
measured after it loaded and warmed up); they restart on their next request.
"""
import asyncio

from rtd.daemon.config import TenantConfig
from rtd.daemon.observe.metrics import Timing
from rtd.daemon.serving.lifecycle import ManagedModel, ModelVersion
from rtd.daemon.serving.scheduler import Answer, InferRequest
from rtd.daemon.serving.services import TenantServices
from rtd.errors import Code, RtdError


class Tenancy:
    def __init__(self, tenant: TenantConfig, limits, policy, events, metrics, spawn):
        """`spawn(socket)`: a confined worker of this tenant (blocking)."""
        self.tenant, self.policy = tenant, policy
        self.models: dict[str, ManagedModel] = {}
        self.load_lock = asyncio.Lock()
        self.services = TenantServices(tenant.id, limits, policy.limits, events, metrics, spawn, self.make_room,
                                       asyncio.Semaphore(limits.max_concurrency))

    def model(self, name: str) -> ManagedModel:
        """The owner of `name`, made if the tenant has none yet (the caller loads it)."""
        model = self.models.get(name)
        if model is None:
            model = self.models[name] = ManagedModel(name, self.services)
        return model

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
                "in_workers": sum(i.in_flight for v in self.versions() for i in v.instances),
                "max_concurrency": limits.max_concurrency}
