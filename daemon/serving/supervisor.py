"""The Supervisor: the ONE serving API (load, unload, infer, list, metadata, config, status)
that every front (gRPC, rtctl, tests, benchmarks) translates onto, on the daemon's event
loop. It holds the budgets (budgets.Ledger) every front inherits, verifies packages with the
loader, hands each tenant's models to that tenant's Tenancy, and keeps the durable state
(registry, rollback marks) consistent with what it serves: a load is persisted before it
is answered and before the new version serves; an unload is persisted before anything
stops; a failed write changes nothing. Tenants are authenticated by the fronts; names are
per tenant. The supervisor never parses a model graph.
"""
import asyncio
import concurrent.futures
import functools
import os
import time

from google.protobuf import json_format

from rtd.daemon.serving.budgets import OPERATOR, Charge, Ledger
from rtd.daemon.config import ALL_MODELS, Config, TenantConfig
from rtd.daemon.observe.events import EventLog
from rtd.daemon.observe.gpu_watch import GpuKill, GpuWatch
from rtd.daemon.serving.lifecycle import ManagedModel, ModelState
from rtd.daemon.observe.metrics import Metrics, Timing
from rtd.daemon.state.registry import Registry
from rtd.daemon.state.repository import check_version_policy, package_size, repository_models, repository_version
from rtd.daemon.serving.instances import WORKER_ENTRY
from rtd.daemon.serving.scheduler import InferRequest
from rtd.daemon.serving.tenancy import Tenancy
from rtd.daemon.serving.tenants import Tenants
from rtd.dtypes import BY_CONFIG, BY_KSERVE
from rtd.errors import Code, RtdError
from rtd.loader import IntakeLimits, RollbackStore, TrustStore, verify_package
from rtd.proto import model_config_pb2 as mc
from rtd.sandbox import TenantIdentity, load_policy

PLATFORM = "rtd_onnx"


async def _to_the_end(work) -> None:
    """Run `work` to its end even if the caller is cancelled (a load or unload half done is
    a half state); the caller gets its outcome if it still waits, and an outcome nobody
    waits for any more is consumed here, not logged as never retrieved."""
    task = asyncio.get_running_loop().create_task(work)
    task.add_done_callback(lambda t: t.cancelled() or t.exception())
    await asyncio.shield(task)


def budgets_of(config: Config) -> tuple[dict, dict]:
    """(per-tenant limits, supervisor-wide limits) of the Ledger's resources."""
    limits = config.limits
    per_tenant = {"requests": limits.max_queue, "request_bytes": limits.tenant_request_bytes,
                  "response_bytes": limits.tenant_response_bytes, "streams": limits.tenant_streams,
                  "connections": limits.tenant_connections, "package_bytes": limits.tenant_package_bytes}
    total = {"request_bytes": limits.total_request_bytes, "response_bytes": limits.total_response_bytes,
             "package_bytes": limits.total_package_bytes}
    return per_tenant, total


class InferResult:
    """What ran, the response the worker built (a view of its arena until released; REST: its
    JSON part's length where binary outputs follow) and what the front holds until the
    response has left: the request's slot and its response bytes."""

    def __init__(self, version: str, body, json_length: int | None, charges: list[Charge]):
        self.version, self.body, self.json_length, self.charges = version, body, json_length, charges


class Supervisor:
    def __init__(self, config: Config, zygote, metrics: Metrics | None = None, events: EventLog | None = None):
        self.config, self.zygote = config, zygote
        self.metrics, self.events = metrics or Metrics(), events or EventLog()
        per_tenant, total = budgets_of(config)
        self.ledger = Ledger(per_tenant, total, [t.id for t in config.tenants], on_refusal=self._budget_refused)
        self.tenants = Tenants(config)
        self.registry = Registry(config.state_dir)
        self.rollback = RollbackStore(os.path.join(config.state_dir, "rollback.json"))
        self.trust = {t.id: TrustStore(t.trusted_keys) for t in config.tenants}
        self.tenancies: dict[str, Tenancy] = {}
        self.io = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="rtd-io")   # hashing, fsync
        self.started, self.draining = False, False
        self.gpu_watch: GpuWatch | None = None   # started when a tenant names GPUs and NVML initialises
        self.gpu_unattributed = ""               # why the watcher refused to start: NVML's memory is nobody's we can tell
        self.metrics.status_source = self.status

    def _budget_refused(self, who: str, resource: str) -> None:
        self.metrics.budget_refused(who, resource)
        self.events.emit("budget_refused", None if who == OPERATOR else who, level="warning", resource=resource)

    async def _io(self, fn, *args, **kwargs):
        return await asyncio.get_running_loop().run_in_executor(self.io, lambda: fn(*args, **kwargs))

    # -- life cycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Restore every recorded model, verified again against today's trust stores; a
        model that cannot be restored costs that model only."""
        self.tenancies = {}
        for tenant in self.config.tenants:
            policy = load_policy(tenant.policy or None)
            identity = TenantIdentity(name=tenant.id, uid=tenant.uid, gid=tenant.gid)
            self.tenancies[tenant.id] = Tenancy(tenant, self.config.limits, policy, self.events, self.metrics,
                                                functools.partial(self._spawn, tenant.id, policy, identity))
        await self._start_gpu_watch()
        for tenancy in self.tenancies.values():
            # a confined spare per tenant, armed now, makes its first worker start as fast as a
            # restart; one that cannot be armed is no refusal: the first spawn reports the same
            try:
                await asyncio.get_running_loop().run_in_executor(None, self.zygote.prepare, tenancy.policy,
                                                                  TenantIdentity(name=tenancy.tenant.id, uid=tenancy.tenant.uid,
                                                                                 gid=tenancy.tenant.gid))
            except RtdError as e:
                self.events.emit("spare_not_armed", tenancy.tenant.id, level="warning", reason=e.detail)
        for tenant_id, name, entry in self.registry.listing():
            # rollback marks at least as high as what the registry holds (rollback.json may lag or be reset):
            # in memory first, then on disk if there is room
            self.rollback.raise_floor(tenant_id, name, entry["counter"], entry["manifest_sha256"])
            try:
                self.rollback.record(tenant_id, name, entry["counter"], entry["manifest_sha256"])
            except OSError as e:
                self.events.emit("rollback_write_failed", tenant_id, level="error", model=name, reason=e.strerror)
        for tenant_id, name, entry in self.registry.listing():
            tenancy = self.tenancies.get(tenant_id)
            if tenancy is None:
                self.registry.damaged.append(f"{tenant_id}/{name}: tenant no longer configured, not restored")
                continue
            try:
                files = await self._io(self.registry.files_of, entry)
                await self._load(tenancy, name, files, record=False)
                self.events.emit("restore", tenant_id, model=name, version=entry.get("version_dir"))
            except (RtdError, OSError) as e:
                reason = str(e) if isinstance(e, RtdError) else f"{type(e).__name__}: {e}"
                self.registry.damaged.append(f"{tenant_id}/{name}: not restored: {reason[:200]}")
                self.events.emit("restore_failed", tenant_id, level="error", model=name, reason=reason)
        for tenancy in self.tenancies.values():
            names = tenancy.tenant.load_at_start
            if ALL_MODELS in names:
                names = [name for name, _ in await self._io(repository_models, tenancy.tenant.model_repository)]
            for name in names:
                await self._load_at_start(tenancy, name)
        for line in self.registry.damaged:
            self.events.emit("registry_damaged", level="error", detail=line)
        self.started = True

    def _spawn(self, tenant: str, policy, identity: TenantIdentity, sock):
        """Blocking: a confined worker of `tenant` (called off the event loop); the NVML
        watcher polices it from here on when the tenant names GPUs."""
        handle = self.zygote.spawn(WORKER_ENTRY, policy=policy, identity=identity, sock=sock, args=())
        if policy.limits.gpu_devices and self.gpu_watch is not None:
            self.gpu_watch.watch(tenant, handle)
        return handle

    async def _start_gpu_watch(self) -> None:
        """The NVML watcher, when some tenant names GPUs (off the loop: NVML calls block);
        without NVML the daemon serves without it and says so."""
        budgets = {tid: t.policy.limits.gpu_memory_bytes for tid, t in self.tenancies.items() if t.policy.limits.gpu_devices}
        if not budgets:
            return
        loop = asyncio.get_running_loop()
        gpus = {tid: t.policy.limits.gpu_devices for tid, t in self.tenancies.items() if tid in budgets}
        try:
            self.gpu_watch = await loop.run_in_executor(None, lambda: GpuWatch.start(budgets, self._gpu_killed, self._gpu_health,
                                                                                     tenant_gpus=gpus))
        except RtdError as e:
            if e.code is Code.E_GPU_UNATTRIBUTED:   # NVML runs, but its memory is nobody's we can tell: not ready
                self.gpu_unattributed = e.detail
                self.events.emit("gpu_watch_refused", level="error", code=e.code.name, reason=e.detail,
                                 detail="GPU tenants' models are not ready: no GPU budget can be enforced")
                return
            self.events.emit("gpu_watch_unavailable", level="error", reason=e.detail,
                             detail="GPU tenants' memory is not watched; rtctl doctor says which limit holds")
            return
        self.metrics.gpu_source = self.gpu_watch.readings
        self.events.emit("gpu_watch", gpus=",".join(f"{g.minor}:{g.uuid}" for g in self.gpu_watch.gpus),
                         tenants=",".join(sorted(budgets)), poll_ms=self.gpu_watch.poll_s * 1000)

    def _gpu_killed(self, kill: GpuKill) -> None:
        """The watcher's thread killed a worker over its tenant's GPU budget (EventLog is thread-safe)."""
        self.events.emit("gpu_kill", kill.tenant, level="warning", pid=kill.pid, tenant_bytes=kill.tenant_bytes,
                         worker_bytes=kill.worker_bytes, budget_bytes=kill.budget_bytes, latency_ms=kill.latency_ms)

    def _gpu_health(self, minor: int, error: str | None) -> None:
        self.events.emit("gpu_health", level="error" if error else "info", gpu=minor,
                         state=f"unhealthy: {error}" if error else "healthy")

    async def _load_at_start(self, tenancy: Tenancy, name: str) -> None:
        """Load a model the tenant lists in `load` from its repository, unless the registry
        already restored that very version; a failure costs that model only."""
        tid = tenancy.tenant.id
        try:
            source = await self._io(repository_version, tenancy.tenant.model_repository, name)
            model = tenancy.models.get(name)
            if model is not None and model.serving is not None and model.serving.version_dir == os.path.basename(source):
                return
            async with tenancy.load_lock:
                await self._load(tenancy, name, source)
        except (RtdError, OSError) as e:
            reason = str(e) if isinstance(e, RtdError) else f"{type(e).__name__}: {e}"
            self.registry.damaged.append(f"{tid}/{name}: not loaded from the model repository: {reason[:200]}")

    def ready(self) -> bool:
        return self.started and not self.draining

    async def drain(self, grace_s: float) -> None:
        """Stop taking work, let requests in flight finish up to `grace_s`, stop every worker."""
        self.draining = True
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(
                i.in_flight for t in self.tenancies.values() for v in t.versions() for i in v.instances):
            await asyncio.sleep(0.02)
        for tenancy in self.tenancies.values():
            for version in tenancy.versions():
                version.stop("daemon stopping")
                version.package.close()
        if self.gpu_watch is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.gpu_watch.stop)
        self.io.shutdown(wait=False, cancel_futures=True)

    def reload_config(self, config: Config) -> None:
        """SIGHUP: tokens and trust stores from a new config, all or nothing. Changes that
        need a restart (tenants added or removed, uids, policies, limits) are refused."""
        old = {t.id: t for t in self.config.tenants}
        new = {t.id: t for t in config.tenants}
        if set(old) != set(new):
            raise RtdError(Code.E_CONFIG_INVALID, f"tenants added or removed ({sorted(set(old) ^ set(new))}): restart rtd")
        for tid, tenant in new.items():
            if (tenant.uid, tenant.gid, tenant.policy) != (old[tid].uid, old[tid].gid, old[tid].policy):
                raise RtdError(Code.E_CONFIG_INVALID, f"tenant {tid}: uid, gid or policy changed: restart rtd")
        if config.limits != self.config.limits:
            raise RtdError(Code.E_CONFIG_INVALID, "limits changed: restart rtd")
        trust = {t.id: TrustStore(t.trusted_keys) for t in config.tenants}   # raises before anything changes
        self.tenants, self.trust, self.config = Tenants(config), trust, config
        for tenancy in self.tenancies.values():
            tenancy.tenant = new[tenancy.tenant.id]

    # -- repository ---------------------------------------------------------------------------
    def _tenancy(self, tenant: TenantConfig) -> Tenancy:
        return self.tenancies[tenant.id]

    def _model(self, tenant: TenantConfig, name: str) -> ManagedModel:
        model = self._tenancy(tenant).models.get(name)
        if model is None:
            raise RtdError(Code.E_MODEL_NOT_FOUND, repr(name))
        return model

    async def load(self, tenant: TenantConfig, name: str, files: dict, config_json: str | None = None) -> None:
        """Verify a signed package ({relative path: bytes}) and serve it beside the old
        version until it is ready. No files: load `name` from the tenant's model repository
        (its highest numbered version), or without one reload the loaded package. The work
        runs to its end even if the caller stops waiting, and holds the tenant's request
        budget until then."""
        if self.draining:
            raise RtdError(Code.E_MODEL_UNAVAILABLE, "the daemon is stopping")
        tenancy = self._tenancy(tenant)
        if not files and config_json:
            raise RtdError(Code.E_CONFIG_INVALID, "a config override without a signed package is refused")
        if not files and not tenant.model_repository:
            async with tenancy.load_lock:
                await self._model(tenant, name).reload()
            return
        charge = self.ledger.take(tenant.id, "requests", 1)

        async def run():
            try:
                async with tenancy.load_lock:
                    source = files or await self._io(repository_version, tenant.model_repository, name)
                    await self._load(tenancy, name, source, config_json=config_json)
            finally:
                charge.release()
        await _to_the_end(run())

    async def _load(self, tenancy: Tenancy, name: str, source: dict | str, config_json: str | None = None,
                    record: bool = True) -> None:
        """Verify `source` (files as bytes, or a version directory of the model repository) and serve it."""
        tid, started = tenancy.tenant.id, time.monotonic()
        if name not in tenancy.models and len(tenancy.models) >= self.config.limits.max_models:
            raise self._refused(tid, name, RtdError(Code.E_BUDGET_EXCEEDED, f"models: tenant {tid} holds "
                                                    f"{len(tenancy.models)} of limits.max_models"))
        size = sum(len(b) for b in source.values()) if isinstance(source, dict) else await self._io(package_size, source)
        try:
            held = self.ledger.take(tid, "package_bytes", size)
        except RtdError as e:
            raise self._refused(tid, name, e) from None
        try:
            pkg = await self._io(verify_package, source, trust=self.trust[tid], tenant=tid,
                                 rollback=self.rollback if record else None, expected_name=name,
                                 limits=self._intake_limits)
        except BaseException as e:   # whatever failed, the bytes are no longer held
            held.release()
            if isinstance(e, RtdError):
                raise self._refused(tid, name, e) from None
            raise
        model = tenancy.model(name)
        version = None
        try:
            self._check_config_param(pkg, config_json)
            if isinstance(source, str):
                await self._io(check_version_policy, pkg.config, source)
            version = await model.prepare(pkg, held)
            if record:
                await asyncio.shield(self._io(self._persist, tid, name, pkg))
        except BaseException as e:
            if version is not None:
                model.abort(version)
            else:
                held.release()
                pkg.close()
            if model.serving is None and model.loading is None:
                del tenancy.models[name]
            if isinstance(e, RtdError):
                raise self._refused(tid, name, e) from None
            raise
        model.commit(version)
        self.events.emit("load", tid, model=name, version=pkg.version_dir, semver=pkg.version,
                         instances=version.count, ms=round((time.monotonic() - started) * 1000))

    @property
    def _intake_limits(self) -> IntakeLimits:
        """What one package may hold: the tenant's package budget, also for one file (a big
        model's external data); model.onnx itself stays under the worker guard's cap."""
        budget = self.config.limits.tenant_package_bytes
        return IntakeLimits(max_file_bytes=budget, max_total_bytes=budget)

    def _persist(self, tenant: str, name: str, pkg) -> None:
        self.registry.record(tenant, name, pkg, self.config.limits.tenant_disk_bytes)
        try:
            self.rollback.record(tenant, name, pkg.counter, pkg.manifest_sha256)
        except OSError as e:   # the start raises marks to the registry's counters again
            self.events.emit("rollback_write_failed", tenant, level="error", model=name, reason=e.strerror)

    def _refused(self, tenant: str, name: str, error: RtdError) -> RtdError:
        self.metrics.refused(tenant, error.code.name)
        self.events.emit("load_refused", tenant, level="warning", model=name, code=error.code.name, reason=error.detail)
        return error

    @staticmethod
    def _check_config_param(pkg, config_json: str | None) -> None:
        """tritonclient may send `config` JSON; only the signed config.pbtxt counts, so a
        `config` that says anything else is refused rather than silently ignored."""
        if not config_json:
            return
        try:
            given = json_format.Parse(config_json, mc.ModelConfig())
        except json_format.ParseError as e:
            raise RtdError(Code.E_CONFIG_INVALID, f"config parameter: {e}") from None
        if given != (pkg.config or mc.ModelConfig()):
            raise RtdError(Code.E_CONFIG_INVALID, "the config parameter differs from the signed config.pbtxt")

    async def unload(self, tenant: TenantConfig, name: str) -> None:
        """Forget the model on disk first, then drain its requests and stop its instances;
        once begun it runs to its end even if the caller stops waiting."""
        tenancy = self._tenancy(tenant)

        async def run():
            async with tenancy.load_lock:
                model = self._model(tenant, name)
                await self._io(self.registry.forget, tenant.id, name)
                await model.unload()
                tenancy.models.pop(name, None)
            self.events.emit("unload", tenant.id, model=name)
        await _to_the_end(run())

    async def models(self, tenant: TenantConfig) -> list[dict]:
        """The tenant's models: those loaded, and those of its model repository not loaded
        (UNAVAILABLE, as Triton's repository index lists them; the directory is read off
        the event loop)."""
        on_disk = await self._io(repository_models, tenant.model_repository) if tenant.model_repository else []
        loaded = self._tenancy(tenant).models
        views = {name: m.view() for name, m in loaded.items()}
        if on_disk:
            for name, version in on_disk:
                if name not in loaded:
                    views[name] = {"name": name, "state": "UNAVAILABLE", "reason": "unloaded", "version": version,
                                   "semver": "", "serving": None, "loading": None}
        return [views[name] for name in sorted(views)]

    def model_ready(self, tenant: TenantConfig, name: str, version: str = "") -> bool:
        """READY, and for a tenant that names GPUs, NVML answering for each of them and their memory
        attributed (where the watcher runs; a watcher that refused to start for want of attribution: never)."""
        tenancy = self._tenancy(tenant)
        model = tenancy.models.get(name)
        gpus = tenancy.policy.limits.gpu_devices
        return (model is not None and model.state == ModelState.READY and model.serving is not None
                and (not version or version == model.serving.version_dir)
                and (not gpus or (not self.gpu_unattributed and (self.gpu_watch is None or self.gpu_watch.healthy(gpus)))))

    def metadata(self, tenant: TenantConfig, name: str, version: str = "") -> dict:
        serving = self._model(tenant, name).version_for(version)
        config = serving.package.config
        if config is not None and (config.input or config.output):
            batch = [-1] if config.max_batch_size > 0 else []

            def from_config(t):
                row = BY_CONFIG.get(mc.DataType.Name(t.data_type))
                return {"name": t.name, "datatype": row.kserve if row else "", "shape": batch + list(t.dims)}
            inputs, outputs = [from_config(t) for t in config.input], [from_config(t) for t in config.output]
        else:
            def from_spec(spec):
                return {"name": spec.name, "datatype": spec.datatype, "shape": spec.public_shape()}
            inputs = [from_spec(spec) for spec in serving.signature.inputs]
            outputs = [from_spec(spec) for spec in serving.signature.outputs]
        platform = (config.platform or config.backend) if config is not None else ""
        return {"name": name, "versions": [serving.version_dir], "platform": platform or PLATFORM,
                "inputs": inputs, "outputs": outputs}

    def model_config(self, tenant: TenantConfig, name: str, version: str = "") -> mc.ModelConfig:
        serving = self._model(tenant, name).version_for(version)
        if serving.package.config is not None:
            config = mc.ModelConfig()
            config.CopyFrom(serving.package.config)
            config.name = config.name or name
            return config
        meta = self.metadata(tenant, name, version)

        def enum(datatype):
            row = BY_KSERVE.get(datatype)
            return mc.DataType.Value(row.config) if row else 0
        return mc.ModelConfig(
            name=name, platform=meta["platform"],
            input=[mc.ModelInput(name=t["name"], data_type=enum(t["datatype"]), dims=t["shape"]) for t in meta["inputs"]],
            output=[mc.ModelOutput(name=t["name"], data_type=enum(t["datatype"]), dims=t["shape"]) for t in meta["outputs"]])

    # -- inference ------------------------------------------------------------------------------
    async def infer(self, tenant: TenantConfig, request: InferRequest) -> InferResult:
        """Run one request whose body the worker reads. The response the worker built is
        checked against max_message_bytes (by the worker, and again here from its size) and
        charged to the tenant's response budget before the front hands it on."""
        tenancy = self._tenancy(tenant)
        timing, slot, charge = Timing(time.monotonic()), None, None
        try:
            if self.draining:
                raise RtdError(Code.E_MODEL_UNAVAILABLE, "the daemon is stopping")
            slot = self.ledger.take(tenant.id, "requests", 1)
            serving, answer = await tenancy.infer(request, timing)
            charge = self.ledger.take(tenant.id, "response_bytes", answer.body.size)
        except BaseException as e:
            for held in (slot, charge):
                if held is not None:
                    held.release()
            self._failed(tenancy, request.model, request.version, timing, e)
            raise
        finally:
            timing.dequeue()
        self.metrics.succeeded(timing.series, timing, answer.rows if serving.max_batch else 1, time.monotonic())
        return InferResult(serving.version_dir, answer.body, answer.json_length, [slot, charge])

    def _failed(self, tenancy: Tenancy, name: str, version: str, timing: Timing, error: BaseException) -> None:
        """Count a failed request in its model version's series, with Triton's reason: CANCELED
        (the caller went away), REJECTED (refused or timed out before it ran), BACKEND (it
        failed once running) or OTHER; a name the tenant does not serve has no series. A call
        the GPU worker's filter refused is the operator's to see: logged, naming the call."""
        if isinstance(error, RtdError) and error.code is Code.E_SYSCALL_REFUSED:
            self.events.emit("syscall_refused", tenancy.tenant.id, level="error", model=name, reason=error.detail)
        series = timing.series
        if series is None:
            model = tenancy.models.get(name)
            serving = model.serving if model is not None else None
            series = serving and self.metrics.find(tenancy.tenant.id, name, version or serving.version_dir)
        if series is None or not isinstance(error, (RtdError, asyncio.CancelledError)):
            return
        if isinstance(error, asyncio.CancelledError):
            reason = "CANCELED"
        elif timing.compute_start is not None:
            reason = "BACKEND"
        elif error.code in (Code.E_DEADLINE, Code.E_BUDGET_EXCEEDED):
            reason = "REJECTED"
        else:
            reason = "OTHER"
        self.metrics.failed(series, reason, time.monotonic() - timing.start)

    def statistics(self, tenant: TenantConfig, name: str = "", version: str = "") -> list:
        """(model, version, metrics.Series) of the tenant's own serving versions (all of them
        for no name); a name or version it does not serve is NOT_FOUND, as another tenant's is."""
        if name:
            self._model(tenant, name)
        found = self.metrics.statistics(tenant.id, name, version)
        if name and version and not found:
            raise RtdError(Code.E_MODEL_NOT_FOUND, f"{name!r} version {version}")
        return found

    # -- operator views --------------------------------------------------------------------------
    def status(self) -> dict:
        return {"ready": self.ready(), "state_dir": self.config.state_dir, "damaged": list(self.registry.damaged),
                "budgets": self.ledger.usage(),
                "tenants": [{**t.view(), "budgets": self.ledger.usage(tid)} for tid, t in self.tenancies.items()]}
