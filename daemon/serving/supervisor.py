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
import dataclasses
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
from rtd.daemon.state.repository import Repository, check_version_policy, package_size
from rtd.daemon.state.revocations import Revocations
from rtd.daemon.serving.tenant_io import TenantIO
from rtd.daemon.serving.uploads import DECODER_ENTRY, SMALL_BODY, Upload, from_rest
from rtd.daemon.serving.instances import WORKER_ENTRY
from rtd.daemon.serving.scheduler import InferRequest
from rtd.daemon.serving.tenancy import Tenancy
from rtd.daemon.serving.tenants import Tenants
from rtd.dtypes import BY_CONFIG, BY_KSERVE
from rtd.errors import Code, RtdError
from rtd.loader import IntakeLimits, RollbackStore, TrustStore, verify_package
from rtd.loader.directory import ModelDir
from rtd.proto import model_config_pb2 as mc
from rtd.sandbox import TenantIdentity, load_policy

PLATFORM = "rtd_onnx"
REPAIR = "rtctl state repair --tenant {}"


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
        self.rollback = {t.id: RollbackStore(os.path.join(self.registry.tenants_dir, t.id, "rollback.json"))
                         for t in config.tenants}
        self._split_earlier_marks()
        self.revocations = {t.id: Revocations(os.path.join(self.registry.tenants_dir, t.id, "revoked.json"))
                            for t in config.tenants}
        self.trust = {t.id: self._remembered(t.id, TrustStore(t.trusted_keys)) for t in config.tenants}
        self.repositories = {t.id: Repository(t.model_repository) for t in config.tenants if t.model_repository}
        self.io = {t.id: TenantIO(t.id) for t in config.tenants}   # each tenant's file work, on threads of its own
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

    def _split_earlier_marks(self) -> None:
        """A state directory of the earlier layout kept every tenant's marks in one rollback.json:
        each tenant's go to its own store, once, and the old file is kept as rollback.json.migrated."""
        old = os.path.join(self.config.state_dir, "rollback.json")
        if not (os.path.exists(old) or os.path.exists(old + ".last-good")):
            return
        earlier = RollbackStore(old)
        if earlier.unusable:
            self.registry.damaged.append(f"the earlier rollback.json could not be split: {earlier.unusable}")
        for (tenant, name), (counter, digest) in earlier.floors.items():
            if tenant in self.rollback:
                self.rollback[tenant].record(tenant, name, counter, digest)
        for path in (old, old + ".last-good"):
            if os.path.exists(path):
                os.replace(path, path + ".migrated")

    def _check_state_witnesses(self) -> None:
        """A tenant's registry index and rollback marks vouch for each other: once it loaded
        anything both exist, so one whose file and copy are both gone while the other is there
        was lost, not never written."""
        for tid, marks in self.rollback.items():
            if not marks.present and tid in self.registry.written:
                marks.missing("its registry.json is there")
            if marks.floors and tid not in self.registry.written and tid not in self.registry.unusable:
                self.registry.unusable[tid] = "registry.json and its last good copy are gone while rollback.json holds marks"

    def _remembered(self, tid: str, trust: TrustStore) -> TrustStore:
        """The store, revoking what it ever revoked (the daemon's record), its revocations recorded."""
        memory = self.revocations[tid]
        if not trust.unusable:
            try:
                memory.remember(trust.revoked)
            except OSError as e:   # held in memory; written with the next change
                self.events.emit("revocations_write_failed", tid, level="error", reason=e.strerror)
        trust.revoked |= memory.known
        return trust

    def state_damage(self, tid: str) -> str | None:
        """Why a tenant's durable state cannot be trusted to hold its floors (None: it can)."""
        trust = self.trust[tid]
        return (self.registry.unusable.get(tid) or self.rollback[tid].unusable or self.revocations[tid].unusable
                or (f"trusted_keys: {trust.unusable}" if trust.unusable else None))

    def _refuse_damaged_state(self, tid: str) -> None:
        damage = self.state_damage(tid)
        if damage:
            raise RtdError(Code.E_STATE_DAMAGED, f"until `{REPAIR.format(tid)}`: {damage}")

    async def repair(self, tid: str) -> list[str]:
        """The operator's `rtctl state repair`: each of the tenant's damaged state files written
        again from what the daemon knows now (the damaged copies kept aside), its trust store
        read again (on the tenant's threads). Refused, changing nothing, while its trust store
        is still damaged."""
        if tid not in self.rollback:
            raise RtdError(Code.E_MODEL_NOT_FOUND, f"no tenant {tid[:64]!r}")
        tenancy = self.tenancies.get(tid)
        if tenancy is None:
            return await self.io[tid].run(self._repair, tid, timeout=None, what="repairing its state")
        async with tenancy.load_lock:   # no load of the tenant meanwhile
            return await self.io[tid].run(self._repair, tid, timeout=None, what="repairing its state")

    def _repair(self, tid: str) -> list[str]:
        done = []
        trust = TrustStore(self.tenants.by_id[tid].trusted_keys)
        if trust.unusable:
            raise RtdError(Code.E_STATE_DAMAGED, f"trusted_keys: {trust.unusable}: fix or remove that file (rtctl trust "
                                                 "writes both copies), then repair again")
        if self.revocations[tid].unusable:
            done.append(self.revocations[tid].repair(trust.revoked))
        self.trust[tid] = self._remembered(tid, trust)
        if tid in self.registry.unusable:
            done.append(self.registry.repair(tid))
        if self.rollback[tid].unusable:
            for _, name, entry in (e for e in self.registry.listing() if e[0] == tid):
                self.rollback[tid].raise_floor(tid, name, entry["counter"], entry["manifest_sha256"])
            done.append(self.rollback[tid].repair())
        done.append(f"trusted_keys read again: {len(trust.keys)} key(s), {len(trust.revoked)} revocation(s)")
        self.events.emit("state_repaired", tid, level="warning", detail="; ".join(done))
        return done

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
        self._check_state_witnesses()
        for tenant_id, name, entry in self.registry.listing():
            # rollback marks at least as high as what the registry holds (rollback.json may lag or be reset):
            # in memory first, then on disk if there is room
            marks = self.rollback.get(tenant_id)
            if marks is None:
                continue
            marks.raise_floor(tenant_id, name, entry["counter"], entry["manifest_sha256"])
            try:
                marks.record(tenant_id, name, entry["counter"], entry["manifest_sha256"])
            except OSError as e:
                self.events.emit("rollback_write_failed", tenant_id, level="error", model=name, reason=e.strerror)
        for tenant_id, name, entry in self.registry.listing():
            tenancy = self.tenancies.get(tenant_id)
            if tenancy is None:
                self.registry.damaged.append(f"{tenant_id}/{name}: tenant no longer configured, not restored")
                continue
            try:
                files = await self.io[tenant_id].run(self.registry.files_of, entry, timeout=None, what="reading its blobs",
                                                     discard=_close_all)
                await self._load(tenancy, name, files, record=False)
                self.events.emit("restore", tenant_id, model=name, version=entry.get("version_dir"))
            except (RtdError, OSError) as e:
                reason = str(e) if isinstance(e, RtdError) else f"{type(e).__name__}: {e}"
                self.registry.damaged.append(f"{tenant_id}/{name}: not restored: {reason[:200]}")
                self.events.emit("restore_failed", tenant_id, level="error", model=name, reason=reason)
        for tid, marks in self.rollback.items():
            self.registry.damaged += [f"{tid}: {line}" for line in marks.problems + self.revocations[tid].problems]
            self.registry.damaged += [f"{tid}: trusted_keys: {line}" for line in self.trust[tid].problems]
            if self.state_damage(tid):
                self.registry.damaged.append(f"{tid}: {self.state_damage(tid)}: its loads are refused until "
                                             f"`{REPAIR.format(tid)}`")
        for line in self.registry.damaged:
            self.events.emit("registry_damaged", level="error", detail=line)
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
                names = [m["name"] for m in await self._repository(tid, "listing it", Repository.models)]
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

    async def _repository(self, tid: str, what: str, fn, *args, discard=None):
        """fn(the tenant's Repository, *args) on the tenant's own threads, within repository_timeout_s."""
        repository = self.repositories.get(tid)
        if repository is None:
            raise RtdError(Code.E_MODEL_NOT_FOUND, "the tenant has no model repository")
        return await self.io[tid].run(fn, repository, *args, timeout=self.config.limits.repository_timeout_s,
                                      what=f"the model repository, {what},", discard=discard)

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
        trust = {t.id: self._remembered(t.id, TrustStore(t.trusted_keys)) for t in config.tenants}
        for tid, store in trust.items():   # a damaged store refuses its own tenant's loads, nobody else's
            if store.unusable:
                self.events.emit("trust_damaged", tid, level="error", reason=store.unusable)
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
                _close_all(files)
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
                    self._refuse_damaged_state(tid)
                if name not in tenancy.models and len(tenancy.models) >= self.config.limits.max_models:
                    raise RtdError(Code.E_BUDGET_EXCEEDED, f"models: tenant {tid} holds {len(tenancy.models)} of "
                                                           "limits.max_models")
            except BaseException:
                if files is not None:
                    _close_all(files)
                raise
            if files is None:
                pkg, held = await self._verified_from_repository(tenancy, name, at_start)
                if pkg is None:
                    return   # at start: the registry restored that very version
            else:
                pkg, held = await self._verified_files(tid, name, files, record, upload)
        except RtdError as e:
            raise self._refused(tid, name, e, from_repository=files is None) from None
        model = tenancy.model(name)
        version = None
        try:
            self._check_config_param(pkg, config_json)
            version = await model.prepare(pkg, held)
            if record:
                await asyncio.shield(self.io[tid].run(self._persist, tid, name, pkg, timeout=None, what="recording it"))
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

    def _verify(self, tid: str, name: str, source, record: bool):
        return verify_package(source, trust=self.trust[tid], tenant=tid, rollback=self.rollback[tid] if record else None,
                              expected_name=name, limits=self._intake_limits)

    async def _verified_files(self, tid: str, name: str, files: dict, record: bool, upload) -> tuple:
        """(package, its package_bytes charge) of an upload's or a restored package's files, read
        and verified on the tenant's threads; the files' fds are closed there once read."""
        size = sum(len(f) for f in files.values())
        held = upload.charge.split(size) if upload is not None else None
        try:
            if held is None or held.amount < size:
                more = self.ledger.take(tid, "package_bytes", size - (held.amount if held else 0))
                held = held.merge(more) if held is not None else more
        except BaseException:
            if held is not None:
                held.release()
            _close_all(files)
            raise

        def verify():
            try:
                return self._verify(tid, name, files, record)
            except BaseException:
                held.release()   # whatever failed, the bytes are no longer held
                raise
            finally:
                _close_all(files)
        pkg = await self.io[tid].run(verify, timeout=self.config.limits.load_timeout_s, what="reading the package",
                                     discard=lambda late: (late.close(), held.release()),
                                     abandon=lambda: (held.release(), _close_all(files)))
        return pkg, held

    async def _verified_from_repository(self, tenancy: Tenancy, name: str, at_start: bool) -> tuple:
        """(package, its charge) of the version of `name` the repository picks, or (None, None) at
        start when the registry restored that very version. Read beneath the repository on the
        tenant's threads; the model directory's fd is used and closed there only."""
        tid = tenancy.tenant.id
        source, size = await self._repository(tid, f"choosing a version of {name}", _choose, name,
                                              discard=lambda late: late[0].dir.close())
        model = tenancy.models.get(name)
        if at_start and model is not None and model.serving is not None and model.serving.version_dir == source.version:
            source.dir.close()
            return None, None
        try:
            held = self.ledger.take(tid, "package_bytes", size)
        except BaseException:
            source.dir.close()
            raise

        def verify():
            try:
                pkg = self._verify(tid, name, source, True)
                try:
                    check_version_policy(pkg.config, source)
                except BaseException:
                    pkg.close()
                    raise
                return pkg
            except BaseException:
                held.release()
                raise
            finally:
                source.dir.close()
        pkg = await self.io[tid].run(verify, timeout=self.config.limits.load_timeout_s, what=f"reading {name}",
                                     discard=lambda late: (late.close(), held.release()),
                                     abandon=lambda: (held.release(), source.dir.close()))
        return pkg, held

    async def rest_upload(self, tenant: TenantConfig, spool) -> Upload:
        """A spooled REST load request's files and config, read by the tenant's confined upload
        decoder (serving/uploads.py) on the tenant's threads; the package never passes through
        the supervisor's memory and its decoding is charged to the tenant's cgroups."""
        upload, tenancy, limits = Upload(spool), self._tenancy(tenant), self._intake_limits
        caps = {"max_files": limits.max_files, "max_file_bytes": limits.max_file_bytes, "max_total_bytes": limits.max_total_bytes}
        # no GPU; files as big as a package file may be (memfds count against RLIMIT_FSIZE), its memory cgroup as ever
        cpu_only = dataclasses.replace(tenancy.policy.limits, gpu_devices=(), gpu_memory_bytes=0,
                                       fsize_bytes=max(tenancy.policy.limits.fsize_bytes, limits.max_file_bytes))
        policy, identity = dataclasses.replace(tenancy.policy, limits=cpu_only), TenantIdentity(tenant.id, tenant.uid, tenant.gid)

        def spawn(sock):
            return self.zygote.spawn(DECODER_ENTRY, policy=policy, identity=identity, sock=sock, args=())
        timeout, started = self.config.limits.load_timeout_s, time.monotonic()
        await self.io[tenant.id].run(from_rest, upload, spawn, caps, timeout, timeout=timeout + 30,
                                     what="decoding the upload", discard=Upload.close, abandon=upload.close)
        self.events.emit("upload_decoded", tenant.id, files=len(upload), bytes=sum(len(f) for f in upload.values()),
                         confined=upload.size > SMALL_BODY, ms=round((time.monotonic() - started) * 1000))
        return upload

    @property
    def _intake_limits(self) -> IntakeLimits:
        """What one package may hold: the tenant's package budget, also for one file (a big
        model's external data); model.onnx itself stays under the worker guard's cap."""
        budget = self.config.limits.tenant_package_bytes
        return IntakeLimits(max_file_bytes=budget, max_total_bytes=budget)

    def _persist(self, tenant: str, name: str, pkg) -> None:
        self.rollback[tenant].ensure()   # before the first index: an index without marks then means marks lost
        self.registry.record(tenant, name, pkg, self.config.limits.tenant_disk_bytes)
        try:
            self.rollback[tenant].record(tenant, name, pkg.counter, pkg.manifest_sha256)
        except OSError as e:   # the start raises marks to the registry's counters again
            self.events.emit("rollback_write_failed", tenant, level="error", model=name, reason=e.strerror)

    def _refused(self, tenant: str, name: str, error: RtdError, from_repository: bool = False) -> RtdError:
        if from_repository:   # the repository index says why it is not loaded
            self.repository_refusals.setdefault(tenant, {})[name] = str(error)
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
                await self.io[tenant.id].run(self.registry.forget, tenant.id, name, timeout=None, what="forgetting it")
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
                on_disk = await self._repository(tid, "listing it", Repository.models)
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
                "tenants": [{**t.view(), "budgets": self.ledger.usage(tid), "state_damaged": self.state_damage(tid),
                             "load_at_start": dict(self.at_start.get(tid, {}))} for tid, t in self.tenancies.items()]}


def _choose(repository: Repository, name: str) -> tuple[ModelDir, int]:
    """The version of `name` to load, open, and the bytes it will take (on the tenant's thread)."""
    source = repository.version(name)
    try:
        return source, package_size(source)
    except BaseException:
        source.dir.close()
        raise


def _close_all(files: dict) -> None:
    """Close what a package's files hold open: each file's fd, and the upload's (a dict with close())."""
    for f in files.values():
        if hasattr(f, "close"):
            f.close()
    if hasattr(files, "close"):
        files.close()
