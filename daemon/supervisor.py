"""The Supervisor: the ONE serving API (load, unload, infer, list, metadata, config, status)
that the gRPC front, rtctl and the tests translate onto. It verifies packages with the
loader, keeps every tenant's models in that tenant's confined worker, persists what is
loaded, and checks each request against the model's signature before the worker sees it.
Tenants are already authenticated when they reach this API; names are per tenant.
"""
import os
import sys
import threading
import time

from google.protobuf import json_format

from rtd.daemon.admission import Gate
from rtd.daemon.batching import Batcher
from rtd.daemon.config import Config, TenantConfig
from rtd.daemon.metrics import Metrics
from rtd.daemon.pool import Pool
from rtd.daemon.registry import Registry
from rtd.daemon.tensors import CONFIG_TYPES, datatype_of
from rtd.errors import Code, RtdError
from rtd.loader import RollbackStore, TrustStore, verify_package
from rtd.proto import model_config_pb2 as mc

PLATFORM = "rtd_onnx"


def _tensor_meta(spec: dict) -> dict:
    return {"name": spec["name"], "datatype": datatype_of(spec["dtype"]), "shape": list(spec["shape"])}


class Supervisor:
    def __init__(self, config: Config, zygote, metrics: Metrics | None = None):
        self.config = config
        self.metrics = metrics or Metrics()
        self.tenants = {t.id: t for t in config.tenants}
        self.registry = Registry(config.state_dir)
        self.rollback = RollbackStore(os.path.join(config.state_dir, "rollback.json"))
        self.pool = Pool(zygote, config.tenants, config.limits, self.metrics)
        self.gates = {t.id: Gate(config.limits.max_queue, config.limits.max_concurrency) for t in config.tenants}
        self.load_locks = {t.id: threading.Lock() for t in config.tenants}
        self.batchers: dict[tuple[str, str], Batcher] = {}
        self.metrics.memory_source = self.memory
        self.started = False

    # -- life cycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Restore every recorded model (verified again, against today's trust stores)."""
        for tenant_id, name, files in self.registry.packages():
            tenant = self.tenants.get(tenant_id)
            if tenant is None:
                print(f"rtd: registry holds {name!r} of unknown tenant {tenant_id!r}; not restored", file=sys.stderr)
                continue
            try:
                pkg = verify_package(files, trust=TrustStore(tenant.trusted_keys), tenant=tenant.id,
                                     rollback=None, expected_name=name)
                self._place(tenant, name, pkg)
            except RtdError as e:
                print(f"rtd: could not restore {tenant.id}/{name}: {e}", file=sys.stderr)
        self.pool.start()
        self.started = True

    def close(self) -> None:
        self.started = False
        for batcher in self.batchers.values():
            batcher.close()
        self.pool.close()

    def ready(self) -> bool:
        return self.started

    # -- repository ---------------------------------------------------------------------------
    def _slot(self, tenant: TenantConfig, name: str, version: str = ""):
        slot = self.pool.workers[tenant.id].models.get(name)
        if slot is None or (version and version != slot.package.version_dir):
            raise RtdError(Code.E_MODEL_NOT_FOUND, f"{name!r}" + (f" version {version}" if version else ""))
        return slot

    def _place(self, tenant: TenantConfig, name: str, pkg) -> None:
        worker = self.pool.workers[tenant.id]
        try:
            worker.load(name, pkg)
        except BaseException:
            pkg.close()
            raise
        old = self.batchers.pop((tenant.id, name), None)
        if old is not None:
            old.close()
        config = pkg.config
        if config is not None and config.max_batch_size > 0 and config.HasField("dynamic_batching"):
            delay = config.dynamic_batching.max_queue_delay_microseconds / 1e6
            labels = (name, pkg.version_dir, tenant.id)
            self.batchers[(tenant.id, name)] = Batcher(
                name, config.max_batch_size, delay, lambda i, o, d: worker.infer(name, i, o, d),
                on_execution=lambda rows: self.metrics.executed(*labels))

    def load(self, tenant: TenantConfig, name: str, files: dict, config_json: str | None = None) -> None:
        """Verify a signed package ({relative path: bytes}) and serve it; no files = reload by name."""
        if not files:
            if config_json:
                raise RtdError(Code.E_CONFIG_INVALID, "a config override without a signed package is refused")
            self._slot(tenant, name)
            return
        with self.load_locks[tenant.id]:
            held = self.pool.workers[tenant.id].models
            if name not in held and len(held) >= self.config.limits.max_models:
                raise RtdError(Code.E_RESOURCE_EXHAUSTED, f"tenant already has {len(held)} models (limits.max_models)")
            try:
                pkg = verify_package(files, trust=TrustStore(tenant.trusted_keys), tenant=tenant.id,
                                     rollback=self.rollback, expected_name=name)
            except RtdError as e:
                self.metrics.refused(tenant.id, e.code.name)
                raise
            try:
                self._check_config_param(pkg, config_json)
            except RtdError as e:
                pkg.close()
                self.metrics.refused(tenant.id, e.code.name)
                raise
            try:
                self._place(tenant, name, pkg)  # the ONNX guard runs here, inside the worker
            except RtdError as e:
                self.metrics.refused(tenant.id, e.code.name)
                raise
            self.registry.record(tenant.id, pkg)
            self.rollback.record(tenant.id, name, pkg.counter)

    @staticmethod
    def _check_config_param(pkg, config_json: str | None) -> None:
        """tritonclient may send `config` JSON; only the signed config.pbtxt counts, so a
        `config` that says anything else is refused rather than silently ignored."""
        if not config_json:
            return
        try:
            given = json_format.Parse(config_json, mc.ModelConfig())
        except json_format.ParseError as e:
            raise RtdError(Code.E_CONFIG_INVALID, f"config parameter: {str(e)[:200]}") from None
        if given != (pkg.config or mc.ModelConfig()):
            raise RtdError(Code.E_CONFIG_INVALID, "the config parameter differs from the signed config.pbtxt")

    def unload(self, tenant: TenantConfig, name: str) -> None:
        with self.load_locks[tenant.id]:
            self._slot(tenant, name)
            batcher = self.batchers.pop((tenant.id, name), None)
            if batcher is not None:
                batcher.close()
            self.pool.workers[tenant.id].unload(name)
            self.registry.forget(tenant.id, name)

    def models(self, tenant: TenantConfig) -> list[dict]:
        out = []
        for name, slot in sorted(self.pool.workers[tenant.id].models.items()):
            state = "UNAVAILABLE" if slot.failed else ("READY" if slot.ready else "LOADING")
            out.append({"name": name, "version": slot.package.version_dir, "semver": slot.package.version,
                        "state": state, "reason": slot.failed})
        return out

    def model_ready(self, tenant: TenantConfig, name: str, version: str = "") -> bool:
        try:
            slot = self._slot(tenant, name, version)
        except RtdError:
            return False
        return slot.ready and not slot.failed

    def metadata(self, tenant: TenantConfig, name: str, version: str = "") -> dict:
        slot = self._slot(tenant, name, version)
        config = slot.package.config
        signature = slot.signature or {"inputs": [], "outputs": []}
        if config is not None and (config.input or config.output):
            batch = [-1] if config.max_batch_size > 0 else []

            def from_config(t):
                return {"name": t.name, "datatype": CONFIG_TYPES.get(mc.DataType.Name(t.data_type), ""),
                        "shape": batch + list(t.dims)}
            inputs, outputs = [from_config(t) for t in config.input], [from_config(t) for t in config.output]
        else:
            inputs = [_tensor_meta(s) for s in signature["inputs"]]
            outputs = [_tensor_meta(s) for s in signature["outputs"]]
        platform = (config.platform or config.backend) if config is not None else ""
        return {"name": name, "versions": [slot.package.version_dir], "platform": platform or PLATFORM,
                "inputs": inputs, "outputs": outputs}

    def model_config(self, tenant: TenantConfig, name: str, version: str = "") -> mc.ModelConfig:
        slot = self._slot(tenant, name, version)
        if slot.package.config is not None:
            config = mc.ModelConfig()
            config.CopyFrom(slot.package.config)
            config.name = config.name or name
            return config
        meta = self.metadata(tenant, name, version)
        types = {v: k for k, v in CONFIG_TYPES.items()}
        return mc.ModelConfig(
            name=name, platform=meta["platform"],
            input=[mc.ModelInput(name=t["name"], data_type=types.get(t["datatype"], 0), dims=t["shape"]) for t in meta["inputs"]],
            output=[mc.ModelOutput(name=t["name"], data_type=types.get(t["datatype"], 0), dims=t["shape"]) for t in meta["outputs"]])

    # -- inference ------------------------------------------------------------------------------
    @staticmethod
    def _check_inputs(name: str, signature: dict, inputs: dict, outputs: list | None) -> None:
        specs = {s["name"]: s for s in signature["inputs"]}
        missing, unknown = sorted(set(specs) - set(inputs)), sorted(set(inputs) - set(specs))
        if missing or unknown:
            raise RtdError(Code.E_INPUT_INVALID, f"{name}: missing inputs {missing}, unknown inputs {unknown}")
        for key, array in inputs.items():
            spec = specs[key]
            if spec["dtype"] and array.dtype.name != spec["dtype"]:
                raise RtdError(Code.E_INPUT_INVALID, f"input {key!r} is {datatype_of(array.dtype.name)}, "
                                                     f"the model takes {datatype_of(spec['dtype'])}")
            shape = spec["shape"]
            if len(shape) != array.ndim or any(d >= 0 and d != a for d, a in zip(shape, array.shape)):
                raise RtdError(Code.E_INPUT_INVALID, f"input {key!r} has shape {list(array.shape)}, the model takes {shape}")
        known = {s["name"] for s in signature["outputs"]}
        for out in outputs or ():
            if out not in known:
                raise RtdError(Code.E_INPUT_INVALID, f"{name} has no output {out!r}")

    def infer(self, tenant: TenantConfig, name: str, version: str, inputs: dict,
              outputs: list | None = None, timeout_s: float | None = None) -> tuple[str, dict]:
        """Run one request; returns (version, {output name: ndarray})."""
        start = time.monotonic()
        slot = self._slot(tenant, name, version)
        version = slot.package.version_dir
        if slot.failed:
            raise RtdError(Code.E_MODEL_FAILED, slot.failed)
        if slot.signature is None:
            raise RtdError(Code.E_MODEL_UNAVAILABLE, f"{name} is loading")
        try:
            self._check_inputs(name, slot.signature, inputs, outputs)
            limit = self.config.limits.request_timeout_s
            deadline = start + (min(timeout_s, limit) if timeout_s else limit)
            batcher = self.batchers.get((tenant.id, name))
            with self.gates[tenant.id].admit(deadline):
                admitted = time.monotonic()
                if batcher is not None:
                    results = batcher.submit(inputs, outputs, deadline)
                else:
                    results = self.pool.workers[tenant.id].infer(name, inputs, outputs, deadline)
                    self.metrics.executed(name, version, tenant.id)
        except RtdError as e:
            self.metrics.failed(name, version, tenant.id, "REJECTED" if e.code.status in (
                "INVALID_ARGUMENT", "RESOURCE_EXHAUSTED") else "BACKEND")
            raise
        done = time.monotonic()
        batched = slot.package.config is not None and slot.package.config.max_batch_size > 0
        batch = next(iter(inputs.values())).shape[0] if batched and inputs else 1
        self.metrics.inferred(name, version, tenant.id, batch, done - start, admitted - start, done - admitted)
        return version, results

    # -- operator views --------------------------------------------------------------------------
    def memory(self) -> dict:
        return {tid: w.view()["usage"].get("memory_bytes", 0) for tid, w in self.pool.workers.items()}

    def status(self) -> dict:
        return {"ready": self.ready(), "state_dir": self.config.state_dir,
                "tenants": [w.view() for w in self.pool.workers.values()]}
