"""The Supervisor: the ONE serving API (load, unload, infer, list, metadata, config, status)
that every front (gRPC, rtctl, tests, benchmarks) translates onto, on the daemon's event
loop. It holds the budgets (budgets.Ledger) every front inherits, verifies packages through its
Intake, hands each tenant's models to that tenant's Tenancy, and keeps the durable state
(state.keeper: registry, rollback marks) consistent with what it serves: a load is persisted before it
is answered and before the new version serves; an unload is persisted before anything
stops; a failed write changes nothing. Tenants are authenticated by the fronts; names are
per tenant. The supervisor never parses a model graph.
"""
import asyncio
import contextlib
import functools
import time

from rtd.daemon.config import ALL_MODELS, Config, TenantConfig
from rtd.daemon.observe.events import EventLog
from rtd.daemon.observe.gpu_events import start_watch
from rtd.daemon.observe.gpu_watch import GpuWatch
from rtd.daemon.observe.metrics import Metrics, Timing
from rtd.daemon.serving import model_views
from rtd.daemon.serving.budgets import OPERATOR, Charge, Ledger
from rtd.daemon.serving.instances import WORKER_ENTRY
from rtd.daemon.serving.intake import Intake, check_config_override, close_all
from rtd.daemon.serving.lifecycle import ManagedModel, ModelState
from rtd.daemon.serving.scheduler import InferRequest
from rtd.daemon.serving.tenancy import Tenancy
from rtd.daemon.serving.tenant_io import TenantIO
from rtd.daemon.serving.tenants import Tenants
from rtd.daemon.serving.uploads import Upload
from rtd.daemon.state.keeper import StateKeeper
from rtd.daemon.state.repository import Repository
from rtd.errors import Code, RtdError
from rtd.proto import model_config_pb2 as mc
from rtd.sandbox import TenantIdentity, load_policy


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
        self.state = StateKeeper(config, self.events)
        self.io = {t.id: TenantIO(t.id) for t in config.tenants}   # each tenant's file work, on threads of its own
        self.intake = Intake(config, self.ledger, self.state, self.io, zygote, self.events)
        self.at_start: dict[str, dict] = {}                        # tenant -> its load-at-start: {model: state}
        self.repository_refusals: dict[str, dict] = {}             # tenant -> {model: why its last load from the repository failed}
        self.background: list[asyncio.Task] = []
        self.tenancies: dict[str, Tenancy] = {}
        self.started, self.draining = False, False
        self.gpu_watch: GpuWatch | None = None   # started when a tenant names GPUs and NVML initialises
        self.gpu_unattributed = ""               # why the watcher refused to start: NVML's memory is nobody's we can tell
        self.metrics.status_source = self.status

    def _budget_refused(self, who: str, resource: str) -> None:
        self.metrics.budget_refused(who, resource)
        self.events.emit("budget_refused", None if who == OPERATOR else who, level="warning", resource=resource)

    async def repair(self, tid: str) -> list[str]:
        """The operator's `rtctl state repair` (state.keeper), on the tenant's threads, no load of
        the tenant meanwhile."""
        if tid not in self.io:
            raise RtdError(Code.E_MODEL_NOT_FOUND, f"no tenant {tid[:64]!r}")
        repair = functools.partial(self.state.repair, tid, self.tenants.by_id[tid].trusted_keys)
        tenancy = self.tenancies.get(tid)
        async with tenancy.load_lock if tenancy is not None else contextlib.nullcontext():
            return await self.io[tid].run(repair, timeout=None, what="repairing its state")

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
        self.gpu_watch, self.gpu_unattributed = await start_watch({tid: t.policy for tid, t in self.tenancies.items()},
                                                                  self.events, self.metrics)
        for tenancy in self.tenancies.values():
            # a confined spare per tenant, armed now, makes its first worker start as fast as a
            # restart; one that cannot be armed is no refusal: the first spawn reports the same
            try:
                await asyncio.get_running_loop().run_in_executor(None, self.zygote.prepare, tenancy.policy,
                                                                  TenantIdentity(name=tenancy.tenant.id, uid=tenancy.tenant.uid,
                                                                                 gid=tenancy.tenant.gid))
            except RtdError as e:
                self.events.emit("spare_not_armed", tenancy.tenant.id, level="warning", reason=e.detail)
        self.state.raise_floors()
        registry = self.state.registry
        for tenant_id, name, entry in registry.listing():
            tenancy = self.tenancies.get(tenant_id)
            if tenancy is None:
                registry.damaged.append(f"{tenant_id}/{name}: tenant no longer configured, not restored")
                continue
            try:
                files = await self.io[tenant_id].run(registry.files_of, entry, timeout=None, what="reading its blobs",
                                                     discard=close_all)
                await self._load(tenancy, name, files, record=False)
                self.events.emit("restore", tenant_id, model=name, version=entry.get("version_dir"))
            except (RtdError, OSError) as e:
                reason = str(e) if isinstance(e, RtdError) else f"{type(e).__name__}: {e}"
                registry.damaged.append(f"{tenant_id}/{name}: not restored: {reason[:200]}")
                self.events.emit("restore_failed", tenant_id, level="error", model=name, reason=reason)
        self.state.report()
        self.started = True

    def load_at_start(self) -> None:
        """Each tenant's `load` list, from its model repository, in the background (the listeners
        are up): a tenant's slow or hostile repository delays only its own models."""
        for tenancy in self.tenancies.values():
            if tenancy.tenant.load_at_start:
                self.background.append(asyncio.get_running_loop().create_task(self._load_listed(tenancy)))

    async def _load_listed(self, tenancy: Tenancy) -> None:
        tid = tenancy.tenant.id
        names, progress = tenancy.tenant.load_at_start, self.at_start.setdefault(tid, {})
        if ALL_MODELS in names:
            try:
                names = [m["name"] for m in await self.intake.repository(tid, "listing it", Repository.models)]
            except RtdError as e:
                progress[ALL_MODELS] = f"not loaded: {e}"
                self.events.emit("load_at_start_failed", tid, level="error", reason=str(e))
                return
        progress.update({name: "pending" for name in names})
        for name in names:
            progress[name] = "loading"
            progress[name] = await self._load_at_start(tenancy, name)

    def _spawn(self, tenant: str, policy, identity: TenantIdentity, sock):
        """Blocking: a confined worker of `tenant` (called off the event loop); the NVML
        watcher polices it from here on when the tenant names GPUs."""
        handle = self.zygote.spawn(WORKER_ENTRY, policy=policy, identity=identity, sock=sock, args=())
        if policy.limits.gpu_devices and self.gpu_watch is not None:
            self.gpu_watch.watch(tenant, handle)
        return handle

    async def _load_at_start(self, tenancy: Tenancy, name: str) -> str:
        """Load a model the tenant lists in `load` from its repository, unless the registry
        already restored that very version; a failure costs that model only. Its outcome, for status."""
        tid = tenancy.tenant.id
        try:
            async with tenancy.load_lock:
                await self._load(tenancy, name, None, at_start=True)
            return "loaded"
        except (RtdError, OSError) as e:
            reason = str(e) if isinstance(e, RtdError) else f"{type(e).__name__}: {e}"
            self.events.emit("load_at_start_failed", tid, level="error", model=name, reason=reason[:200])
            return f"not loaded: {reason[:200]}"

    def ready(self) -> bool:
        return self.started and not self.draining

    async def drain(self, grace_s: float) -> None:
        """Stop taking work, let requests in flight finish up to `grace_s`, stop every worker."""
        self.draining = True
        for task in self.background:
            task.cancel()
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
        if any(new[tid].model_repository != old[tid].model_repository for tid in new):
            raise RtdError(Code.E_CONFIG_INVALID, "model_repository changed: restart rtd")
        self.state.reread_trust(config)
        self.tenants, self.config = Tenants(config), config
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

    async def load(self, tenant: TenantConfig, name: str, files, config_json: str | None = None, upload=None) -> None:
        """Verify a signed package ({relative path: bytes or Extent}) and serve it beside the old
        version until it is ready. No files: load `name` from the tenant's model repository (the
        version its config picks), or without one reload the loaded package. `upload`: the
        spooled request the files lie in, whose package_bytes charge the package's bytes are
        taken from (never charged twice). The work runs to its end even if the caller stops
        waiting, and holds the tenant's request budget until then."""
        tenancy = self._tenancy(tenant)
        try:   # the files are this call's to close from here on (their reader does, once it has them)
            if self.draining:
                raise RtdError(Code.E_MODEL_UNAVAILABLE, "the daemon is stopping")
            if not files and config_json:
                raise RtdError(Code.E_CONFIG_INVALID, "a config override without a signed package is refused")
            if files or tenant.model_repository:
                charge = self.ledger.take(tenant.id, "requests", 1)
        except BaseException:
            if files:
                close_all(files)
            raise
        if not files and not tenant.model_repository:
            async with tenancy.load_lock:
                await self._model(tenant, name).reload()
            return

        async def run():
            try:
                async with tenancy.load_lock:
                    await self._load(tenancy, name, files or None, config_json=config_json, upload=upload)
            finally:
                charge.release()
        await _to_the_end(run())

    async def _load(self, tenancy: Tenancy, name: str, files, config_json: str | None = None, record: bool = True,
                    upload=None, at_start: bool = False) -> None:
        """Verify `files` (an upload's or the registry's: {path: bytes or Extent}) or, for None, the
        version of `name` the tenant's model repository picks, and serve it."""
        tid, started = tenancy.tenant.id, time.monotonic()
        try:
            try:
                if record:
                    self.state.refuse_damaged(tid)
                if name not in tenancy.models and len(tenancy.models) >= self.config.limits.max_models:
                    raise RtdError(Code.E_BUDGET_EXCEEDED, f"models: tenant {tid} holds {len(tenancy.models)} of "
                                                           "limits.max_models")
            except BaseException:
                if files is not None:
                    close_all(files)
                raise
            if files is None:
                pkg, held = await self.intake.from_repository(tenancy, name, at_start)
                if pkg is None:
                    return   # at start: the registry restored that very version
            else:
                pkg, held = await self.intake.files(tid, name, files, record, upload)
        except RtdError as e:
            raise self._refused(tid, name, e, from_repository=files is None) from None
        model = tenancy.model(name)
        version = None
        try:
            check_config_override(pkg, config_json)
            version = await model.prepare(pkg, held)
            if record:
                await asyncio.shield(self.io[tid].run(self.state.record, tid, name, pkg, timeout=None, what="recording it"))
        except BaseException as e:
            if version is not None:
                model.abort(version)
            else:
                held.release()
                pkg.close()
            if model.serving is None and model.loading is None:
                del tenancy.models[name]
            if isinstance(e, RtdError):
                raise self._refused(tid, name, e, from_repository=files is None) from None
            raise
        model.commit(version)
        self.repository_refusals.get(tid, {}).pop(name, None)
        self.events.emit("load", tid, model=name, version=pkg.version_dir, semver=pkg.version,
                         instances=version.count, ms=round((time.monotonic() - started) * 1000))

    async def rest_upload(self, tenant: TenantConfig, spool) -> Upload:
        """A spooled REST load request's files and config, decoded by the tenant's confined upload decoder."""
        return await self.intake.rest_upload(self._tenancy(tenant), spool)

    def _refused(self, tenant: str, name: str, error: RtdError, from_repository: bool = False) -> RtdError:
        if from_repository:   # the repository index says why it is not loaded
            self.repository_refusals.setdefault(tenant, {})[name] = str(error)
        self.metrics.refused(tenant, error.code.name)
        self.events.emit("load_refused", tenant, level="warning", model=name, code=error.code.name, reason=error.detail)
        return error

    async def unload(self, tenant: TenantConfig, name: str) -> None:
        """Forget the model on disk first, then drain its requests and stop its instances;
        once begun it runs to its end even if the caller stops waiting."""
        tenancy = self._tenancy(tenant)

        async def run():
            async with tenancy.load_lock:
                model = self._model(tenant, name)
                await self.io[tenant.id].run(self.state.registry.forget, tenant.id, name, timeout=None, what="forgetting it")
                await model.unload()
                tenancy.models.pop(name, None)
            self.events.emit("unload", tenant.id, model=name)
        await _to_the_end(run())

    async def models(self, tenant: TenantConfig) -> list[dict]:
        """The tenant's models: those loaded, and those of its model repository not loaded
        (UNAVAILABLE, as Triton's repository index lists them, with the reason one cannot be
        loaded, or why its last load from the repository was refused). The directory is read on the tenant's threads; a
        repository that cannot be read at all is E_REPOSITORY_UNAVAILABLE (one not made yet is empty)."""
        tid = tenant.id
        on_disk = []
        if tenant.model_repository:
            try:
                on_disk = await self.intake.repository(tid, "listing it", Repository.models)
            except RtdError as e:
                if e.code is not Code.E_FILE_MISSING:
                    raise
        loaded = self._tenancy(tenant).models
        views = {name: m.view() for name, m in loaded.items()}
        refused = self.repository_refusals.get(tid, {})
        for found in on_disk:
            name = found["name"]
            if name not in loaded:
                views[name] = {"name": name, "state": "UNAVAILABLE", "version": found["version"],
                               "reason": found.get("reason") or refused.get(name, "unloaded"),
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
        return model_views.metadata(name, self._model(tenant, name).version_for(version))

    def model_config(self, tenant: TenantConfig, name: str, version: str = "") -> mc.ModelConfig:
        return model_views.model_config(name, self._model(tenant, name).version_for(version))

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
        return {"ready": self.ready(), "state_dir": self.config.state_dir, "damaged": list(self.state.registry.damaged),
                "budgets": self.ledger.usage(),
                "tenants": [{**t.view(), "budgets": self.ledger.usage(tid), "state_damaged": self.state.damage(tid),
                             "load_at_start": dict(self.at_start.get(tid, {}))} for tid, t in self.tenancies.items()]}


