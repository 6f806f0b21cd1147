"""Package intake: a tenant's package — an upload's files, a restored package's blobs, or the version
its model repository picks — charged to its package budget and verified by the loader on the
tenant's own threads (tenant_io), against its trust store and rollback marks (state.keeper). A REST
upload is decoded by a confined process of the tenant's first (serving/uploads.py). Whatever fails,
the bytes are released and every fd the intake was handed is closed, once.
"""
import dataclasses
import time

from google.protobuf import json_format

from rtd.daemon.observe.events import EventLog
from rtd.daemon.serving.budgets import Ledger
from rtd.daemon.serving.tenancy import Tenancy
from rtd.daemon.serving.tenant_io import TenantIO
from rtd.daemon.serving.uploads import DECODER_ENTRY, SMALL_BODY, Upload, from_rest
from rtd.daemon.state.keeper import StateKeeper
from rtd.daemon.state.repository import Repository, check_version_policy, package_size
from rtd.errors import Code, RtdError
from rtd.loader import IntakeLimits, verify_package
from rtd.loader.directory import ModelDir
from rtd.proto import model_config_pb2 as mc
from rtd.sandbox import TenantIdentity


class Intake:
    def __init__(self, config, ledger: Ledger, state: StateKeeper, io: dict[str, TenantIO], zygote, events: EventLog):
        self.limits, self.ledger, self.state, self.io, self.zygote, self.events = config.limits, ledger, state, io, zygote, events
        self.repositories = {t.id: Repository(t.model_repository) for t in config.tenants if t.model_repository}

    @property
    def package_limits(self) -> IntakeLimits:
        """What one package may hold: the tenant's package budget, also for one file (a big
        model's external data); model.onnx itself stays under the worker guard's cap."""
        budget = self.limits.tenant_package_bytes
        return IntakeLimits(max_file_bytes=budget, max_total_bytes=budget)

    def _verify(self, tid: str, name: str, source, record: bool):
        return verify_package(source, trust=self.state.trust[tid], tenant=tid, expected_name=name,
                              rollback=self.state.rollback[tid] if record else None, limits=self.package_limits)

    async def repository(self, tid: str, what: str, fn, *args, discard=None):
        """fn(the tenant's Repository, *args) on the tenant's own threads, within repository_timeout_s."""
        repository = self.repositories.get(tid)
        if repository is None:
            raise RtdError(Code.E_MODEL_NOT_FOUND, "the tenant has no model repository")
        return await self.io[tid].run(fn, repository, *args, timeout=self.limits.repository_timeout_s,
                                      what=f"the model repository, {what},", discard=discard)

    async def files(self, tid: str, name: str, files: dict, record: bool, upload) -> tuple:
        """(package, its package_bytes charge) of an upload's or a restored package's files, read
        and verified on the tenant's threads; the files' fds are closed there once read. An upload's
        own package_bytes charge is taken over (never charged twice)."""
        size = sum(len(f) for f in files.values())
        held = upload.charge.split(size) if upload is not None else None
        try:
            if held is None or held.amount < size:
                more = self.ledger.take(tid, "package_bytes", size - (held.amount if held else 0))
                held = held.merge(more) if held is not None else more
        except BaseException:
            if held is not None:
                held.release()
            close_all(files)
            raise

        def verify():
            try:
                return self._verify(tid, name, files, record)
            except BaseException:
                held.release()   # whatever failed, the bytes are no longer held
                raise
            finally:
                close_all(files)
        pkg = await self.io[tid].run(verify, timeout=self.limits.load_timeout_s, what="reading the package",
                                     discard=lambda late: (late.close(), held.release()),
                                     abandon=lambda: (held.release(), close_all(files)))
        return pkg, held

    async def from_repository(self, tenancy: Tenancy, name: str, at_start: bool) -> tuple:
        """(package, its charge) of the version of `name` the repository picks, or (None, None) at
        start when the registry restored that very version. Read beneath the repository on the
        tenant's threads; the model directory's fd is used and closed there only."""
        tid = tenancy.tenant.id
        source, size = await self.repository(tid, f"choosing a version of {name}", _choose, name,
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
        pkg = await self.io[tid].run(verify, timeout=self.limits.load_timeout_s, what=f"reading {name}",
                                     discard=lambda late: (late.close(), held.release()),
                                     abandon=lambda: (held.release(), source.dir.close()))
        return pkg, held

    async def rest_upload(self, tenancy: Tenancy, spool) -> Upload:
        """A spooled REST load request's files and config, read by the tenant's confined upload
        decoder (serving/uploads.py) on the tenant's threads; the package never passes through
        the supervisor's memory and its decoding is charged to the tenant's cgroups."""
        upload, limits, tenant = Upload(spool), self.package_limits, tenancy.tenant
        caps = {"max_files": limits.max_files, "max_file_bytes": limits.max_file_bytes, "max_total_bytes": limits.max_total_bytes}
        # no GPU; files as big as a package file may be (memfds count against RLIMIT_FSIZE), its memory cgroup as ever
        cpu_only = dataclasses.replace(tenancy.policy.limits, gpu_devices=(), gpu_memory_bytes=0,
                                       fsize_bytes=max(tenancy.policy.limits.fsize_bytes, limits.max_file_bytes))
        policy, identity = dataclasses.replace(tenancy.policy, limits=cpu_only), TenantIdentity(tenant.id, tenant.uid, tenant.gid)

        def spawn(sock):
            return self.zygote.spawn(DECODER_ENTRY, policy=policy, identity=identity, sock=sock, args=())
        timeout, started = self.limits.load_timeout_s, time.monotonic()
        await self.io[tenant.id].run(from_rest, upload, spawn, caps, timeout, timeout=timeout + 30,
                                     what="decoding the upload", discard=Upload.close, abandon=upload.close)
        self.events.emit("upload_decoded", tenant.id, files=len(upload), bytes=sum(len(f) for f in upload.values()),
                         confined=upload.size > SMALL_BODY, ms=round((time.monotonic() - started) * 1000))
        return upload


def _choose(repository: Repository, name: str) -> tuple[ModelDir, int]:
    """The version of `name` to load, open, and the bytes it will take (on the tenant's thread)."""
    source = repository.version(name)
    try:
        return source, package_size(source)
    except BaseException:
        source.dir.close()
        raise


def check_config_override(pkg, config_json: str | None) -> None:
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


def close_all(files: dict) -> None:
    """Close what a package's files hold open: each file's fd, and the upload's (a dict with close())."""
    for f in files.values():
        if hasattr(f, "close"):
            f.close()
    if hasattr(files, "close"):
        files.close()
