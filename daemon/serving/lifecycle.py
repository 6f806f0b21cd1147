"""Each of a tenant's models has one owner, a ManagedModel: its state (LOADING, READY,
UNAVAILABLE, FAILED, UNLOADING) with the reason for it, the version serving and the
version loading beside it. Every state change happens in `ManagedModel._transition`;
the rest of the daemon asks the owner and never sets its fields.

A ModelVersion is one verified package and the instances serving it (Triton's
`instance_group { count: N }`: N confined workers, requests pipelined on the least busy).
How an instance ended decides what the version does next:
  - a crash or a hang counts toward `crash_limit`; that many in a row mark the model FAILED
    (an answered request resets the count). FAILED is left by a reload (load by name) or
    by unload + load; the identical signed package may be sent again.
  - a kill by the memory layer (or the GPU memory layer) is a resource error caused by a request: counted apart,
    forgotten after `resource_error_window_s`, never a reason for FAILED by itself;
  - a GPU worker killed by its seccomp filter is a containment error (the filter does not know a call the
    driver or CUDA made): logged as such, restarted after the back-off, never counted as the model's crash;
  - our own stop (eviction, unload, replacement, shutdown) counts for nothing.
A dead instance is restarted after an exponential back-off; an evicted one when a request
needs it. While no instance is live the model is UNAVAILABLE and requests wait for one
within their deadline instead of being refused.
"""
import asyncio
import collections
import enum
import time

from rtd.daemon.serving.instances import Ending, Instance
from rtd.daemon.serving.scheduler import Scheduler
from rtd.daemon.serving.services import TenantServices
from rtd.errors import Code, RtdError
from rtd.signature import Signature

BASE_WORKER_BYTES = 48 << 20   # a worker's own footprint before its model (estimate until measured)


class ModelState(enum.Enum):
    LOADING = "LOADING"
    READY = "READY"
    UNAVAILABLE = "UNAVAILABLE"
    FAILED = "FAILED"
    UNLOADING = "UNLOADING"


def instance_count(config, max_instances: int) -> int:
    """Instances a package's config.pbtxt asks for (Triton's default: one)."""
    if config is None or not config.instance_group:
        return 1
    total = 0
    for group in config.instance_group:
        if group.kind not in (0, 2):   # KIND_AUTO, KIND_CPU
            raise RtdError(Code.E_CONFIG_INVALID, f"instance_group {group.name!r}: only CPU instances are offered")
        total += group.count if group.count > 0 else 1
    if total > max_instances:
        raise RtdError(Code.E_CONFIG_INVALID, f"instance_group asks for {total} instances, limits.max_instances is {max_instances}")
    return total


class Retiring:
    """How any version retires, a model's own and one served through other versions' workers (an
    ensemble, a staged model): its users, its instances' requests, stop(), its package and charge."""

    async def retire(self, grace_s: float, package_too: bool = True) -> None:
        """Once no longer chosen for new requests: let those that chose it finish (up to
        `grace_s`), then stop; and give up its package unless a newer version shares it."""
        deadline = time.monotonic() + grace_s
        while (self.users or any(i.in_flight for i in self.instances)) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        self.stop("replaced or unloaded")
        if package_too:
            self.held.release()
            self.package.close()


class ModelVersion(Retiring):
    """One verified package of a model, the instances serving it and its scheduler."""

    def __init__(self, owner: "ManagedModel", package, held, services: TenantServices, load_extra: dict | None = None):
        """`load_extra`: what else its workers' LOAD says (a stage's part and thread share: stages.py)."""
        self.owner, self.package, self.held = owner, package, held   # held: the package-bytes charge
        self.services = services
        self.load_extra = load_extra or {}
        self.load_reply: dict = {}           # the first instance's LOAD answer (a stage's cut: stages.py)
        limits = services.limits
        self.count = instance_count(package.config, limits.max_instances)
        self.instances: list[Instance] = []
        self.signature: Signature | None = None
        self.crashes = 0
        self.resource_errors: collections.deque = collections.deque()
        self.backoff, self.restarting = limits.restart_backoff_s, 0
        self.live = asyncio.Event()          # set while some instance is live
        self.retired = False
        self.users = 0                       # requests that chose this version and are not done
        self.measured = 0                    # resident bytes of one instance, once known
        self.measured_pids = 0               # and its pids
        self.last_reason = ""                # how the last instance that ended did
        self.evictions = 0
        config = package.config
        self.max_batch = config.max_batch_size if config is not None and config.max_batch_size > 0 else 0
        batching = self.max_batch and config.HasField("dynamic_batching")
        metrics, labels = services.metrics, (services.tenant, owner.name, self.version_dir)
        self.scheduler = Scheduler(owner.name, self, services.slots, limits, self.max_batch,
                                   config.dynamic_batching.max_queue_delay_microseconds / 1e6 if batching else None,
                                   on_execution=lambda: metrics.executed(metrics.find(*labels)))

    @property
    def version_dir(self) -> str:
        return self.package.version_dir

    def estimate(self) -> int:
        return self.measured or BASE_WORKER_BYTES + 2 * self.package.model.size

    def pids_estimate(self) -> int:
        """Processes and threads one instance holds: its helper, its worker and the worker's kernel
        threads (one per core of the tenant's, created on first use), or more where measured so."""
        return max(self.measured_pids, 1 + self.services.threads)

    # -- instances ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Start every instance (the first alone: its signature is the model's); on failure
        nothing of this version keeps running."""
        try:
            await self._start_instance(0)
            await asyncio.gather(*(self._start_instance(i) for i in range(1, self.count)))
        except BaseException:
            self.stop("load failed")
            raise

    async def _start_instance(self, index: int) -> Instance:
        services = self.services
        instance = Instance(index, self._ended, services.policy_limits)
        await services.make_room(self.estimate(), self.pids_estimate(), keep=self, claim=lambda: self.instances.append(instance))
        serve_as = {"name": self.owner.name, "version": self.version_dir, "max_batch": self.max_batch,
                    "max_message_bytes": services.limits.max_message_bytes, "max_elements": services.limits.max_request_elements,
                    "threads": services.threads, "device": services.device, **self.load_extra}
        try:
            signature = await instance.start(services.spawn, self.package.model.fd, services.limits.load_timeout_s,
                                             {name: f.fd for name, f in self.package.siblings.items()}, serve_as)
        except BaseException:
            if instance in self.instances:
                self.instances.remove(instance)
            instance.stop(Ending.STOPPED, "start failed")
            raise
        if self.signature is None:
            self.signature, self.load_reply = signature, instance.loaded
        self.measured = max(self.measured, instance.resident)
        self.measured_pids = max(self.measured_pids, instance.pids)
        self.live.set()
        self.owner.version_changed(self)
        return instance

    def _ended(self, instance: Instance) -> None:
        if instance not in self.instances:
            return
        self.instances.remove(instance)
        if not any(i.live for i in self.instances):
            self.live.clear()
        self.last_reason = instance.reason
        services = self.services
        if instance.ending in (Ending.CRASHED, Ending.HUNG):
            self.crashes += 1
            services.emit("crash", model=self.owner.name, version=self.version_dir, ending=instance.ending.value,
                          reason=instance.reason, count=self.crashes)
        elif instance.ending == Ending.RESOURCE:
            now = time.monotonic()
            self.resource_errors.append(now)
            while self.resource_errors and self.resource_errors[0] < now - services.limits.resource_error_window_s:
                self.resource_errors.popleft()
            services.emit("resource_kill", model=self.owner.name, version=self.version_dir, reason=instance.reason,
                          in_window=len(self.resource_errors))
        elif instance.ending == Ending.CONTAINMENT:
            services.emit("containment", level="error", model=self.owner.name, version=self.version_dir,
                          code=Code.E_CONTAINMENT.name, reason=instance.reason)
        if instance.ending != Ending.STOPPED:
            services.metrics.instance_ended(services.tenant, self.owner.name, instance.ending.value)
            if not self.retired and self.crashes < services.limits.crash_limit:
                self._restart_later(instance.index)
        self.owner.version_changed(self)

    def _restart_later(self, index: int) -> None:
        delay, limits = self.backoff, self.services.limits
        self.backoff = min(self.backoff * 2, limits.restart_backoff_max_s)
        self.restarting += 1
        asyncio.get_running_loop().call_later(delay, self._restart, index)

    def _restart(self, index: int) -> None:
        async def run():
            try:
                if not self.retired and self.owner.state != ModelState.FAILED:
                    await self._start_instance(index)
                    self.services.emit("restart", model=self.owner.name, version=self.version_dir, instance=index)
            except RtdError as e:
                self.services.emit("restart_failed", model=self.owner.name, code=e.code.name, reason=e.detail)
                if not self.retired and not any(i.live for i in self.instances):
                    self._restart_later(index)
                    return
            finally:
                self.restarting -= 1
            self.owner.version_changed(self)
        asyncio.get_running_loop().create_task(run())

    def evict(self, instance: Instance) -> None:
        self.evictions += 1
        instance.stop(Ending.STOPPED, "evicted: idle, restarted on the next request")
        self.services.metrics.evicted(self.services.tenant, self.owner.name)
        self.services.emit("evict", model=self.owner.name, version=self.version_dir, instance=instance.index,
                           resident_bytes=instance.resident)

    async def instance(self, deadline: float) -> Instance:
        """The least busy live instance; one is started when every instance was evicted."""
        while True:
            live = [i for i in self.instances if i.live]
            if live:
                return min(live, key=lambda i: i.in_flight)
            if self.owner.state == ModelState.FAILED:
                raise RtdError(Code.E_MODEL_FAILED, self.owner.reason)
            if not self.instances and not self.restarting:   # evicted: bring one back
                self.restarting += 1
                self._restart(0)
            try:
                await asyncio.wait_for(self.live.wait(), max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                raise RtdError(Code.E_MODEL_UNAVAILABLE, f"no instance became ready in time ({self.owner.reason})") from None

    def answered(self) -> None:
        self.crashes = 0
        self.backoff = self.services.limits.restart_backoff_s

    def protocol_error(self, instance: Instance, error: RtdError) -> None:
        """The worker broke the protocol in an answer: it is ended as a crash and restarted."""
        instance.stop(Ending.CRASHED, f"protocol: {error.detail}")

    def stop(self, reason: str) -> None:
        self.retired = True
        self.scheduler.close()
        for instance in list(self.instances):
            instance.stop(Ending.STOPPED, reason)
        self.live.clear()

    def view(self) -> dict:
        return {"version": self.version_dir, "semver": self.package.version, "instances": [i.view() for i in self.instances],
                "configured_instances": self.count, "crashes_in_a_row": self.crashes,
                "resource_errors_in_window": len(self.resource_errors), "resident_bytes": self.measured,
                "evictions": self.evictions}


class ManagedModel:
    """The one owner of one of a tenant's model names."""

    def __init__(self, name: str, services: TenantServices, make_version=None):
        """`make_version(owner, package, held, services)`: the version a package serves as
        (ModelVersion; the tenancy also builds ensembles and staged models)."""
        self.name, self.services = name, services
        self.make_version = make_version or ModelVersion
        self.state, self.reason = ModelState.LOADING, ""
        self.serving: ModelVersion | None = None
        self.loading: ModelVersion | None = None
        self.in_flight = 0

    def _transition(self, state: ModelState, reason: str = "") -> None:
        if (state, reason) == (self.state, self.reason):
            return
        self.services.emit("state", model=self.name, version=self.serving.version_dir if self.serving else "",
                           old=self.state.value, new=state.value, reason=reason)
        self.state, self.reason = state, reason

    # -- loading -------------------------------------------------------------------------------
    async def prepare(self, package, held) -> ModelVersion:
        """Start a new version beside the serving one (which keeps serving); the caller
        persists it and then calls `commit`, or `abort` on any failure."""
        version = self.make_version(self, package, held, self.services)
        self.loading = version
        if self.serving is None:
            self._transition(ModelState.LOADING, f"version {version.version_dir} loading")
        try:
            await version.start()
        except BaseException:
            self.loading = None
            raise
        return version

    def commit(self, version: ModelVersion) -> None:
        old, self.serving, self.loading = self.serving, version, None
        self.services.metrics.track(self.services.tenant, self.name, version.version_dir)
        self._transition(ModelState.READY)
        if old is not None:
            asyncio.get_running_loop().create_task(self._retire(old))

    async def _retire(self, old: ModelVersion) -> None:
        """A replaced version serves what chose it, then stops; its series go unless its
        version number serves again."""
        await old.retire(self.services.limits.request_timeout_s)
        if self.serving is None or self.serving.version_dir != old.version_dir:
            self.services.metrics.forget(self.services.tenant, self.name, old.version_dir)

    def abort(self, version: ModelVersion) -> None:
        version.stop("load refused")
        version.held.release()
        version.package.close()
        if self.loading is version:
            self.loading = None
        if self.serving is not None:
            self.version_changed(self.serving)

    async def reload(self) -> None:
        """Load by name: start the serving version again from its sealed bytes, beside the one
        serving (which keeps serving, if it can, until the new one is ready); leaves FAILED."""
        if self.serving is None or self.state == ModelState.UNLOADING:
            raise RtdError(Code.E_MODEL_UNAVAILABLE, f"{self.name} has no version to reload")
        old = self.serving
        version = self.make_version(self, old.package, old.held, self.services)   # the same verified bytes and their charge
        version.measured, version.measured_pids = old.measured, old.measured_pids
        self.loading = version
        try:
            await version.start()
        except BaseException:
            self.loading = None
            raise
        self.serving, self.loading = version, None
        self._transition(ModelState.READY)
        asyncio.get_running_loop().create_task(   # the package now belongs to the new version
            old.retire(self.services.limits.request_timeout_s, package_too=False))

    # -- serving ---------------------------------------------------------------------------------
    def version_for(self, version: str = "") -> ModelVersion:
        """The version a request goes to, or the refusal its state calls for."""
        serving = self.serving
        if self.state == ModelState.UNLOADING:
            raise RtdError(Code.E_MODEL_UNAVAILABLE, f"{self.name} is unloading")
        if serving is None or (version and version != serving.version_dir):
            if version and self.loading is not None and version == self.loading.version_dir:
                raise RtdError(Code.E_MODEL_UNAVAILABLE, f"{self.name} version {version} is loading")
            if serving is None and not version:
                raise RtdError(Code.E_MODEL_UNAVAILABLE, f"{self.name} is loading")
            raise RtdError(Code.E_MODEL_NOT_FOUND, f"{self.name!r} version {version}")
        if self.state == ModelState.FAILED:
            raise RtdError(Code.E_MODEL_FAILED, self.reason)
        return serving

    def version_changed(self, version: ModelVersion) -> None:
        """An instance of `version` started or ended: the model's state follows."""
        if version is not self.serving or self.state in (ModelState.UNLOADING, ModelState.LOADING):
            return
        limit = self.services.limits.crash_limit
        if version.crashes >= limit:
            self._transition(ModelState.FAILED, f"its worker ended {version.crashes} times in a row "
                                                f"(last: {version.last_reason}); reload or unload and load it")
            version.stop("failed")
        elif self.state == ModelState.FAILED:
            return
        elif version.live.is_set() or (not version.instances and not version.restarting):
            self._transition(ModelState.READY)   # live, or evicted while idle: a request restarts it
        else:
            self._transition(ModelState.UNAVAILABLE, f"restarting ({version.last_reason})")

    # -- unloading -------------------------------------------------------------------------------
    async def unload(self) -> None:
        """UNLOADING: requests in flight finish (up to request_timeout_s), then every instance stops."""
        self._transition(ModelState.UNLOADING)
        for version in (self.loading, self.serving):
            if version is not None:
                await version.retire(self.services.limits.request_timeout_s)
        self.services.metrics.forget(self.services.tenant, self.name)

    def view(self) -> dict:
        serving = self.serving
        return {"name": self.name, "state": self.state.value, "reason": self.reason,
                "version": serving.version_dir if serving else (self.loading.version_dir if self.loading else ""),
                "semver": serving.package.version if serving else "",
                "serving": serving.view() if serving else None,
                "loading": self.loading.view() if self.loading else None}
