"""A Triton ensemble (config.pbtxt `platform: "ensemble"`, `ensemble_scheduling { step [...] }`)
served as one model over the tenant's own models.

An EnsembleVersion stands where a ModelVersion stands (the model's owner, the tenancy and the
supervisor see the same surface) but has no worker of its own: its steps are the tenant's
loaded models, found by name through the tenant's services (another tenant's model is simply
not found), and its requests run through their schedulers (pipeline.Runner). Loading it checks
the config and the steps' signatures only — a step missing, a map to a tensor no step or
input provides, a tensor written twice, a cycle in the maps, a model named by two steps, types
or shapes that do not meet — and refuses with E_ENSEMBLE_INVALID before anything is served.
Its steps are looked up again for every request: one unloaded or replaced since is that
request's refusal, naming the step.
"""
import asyncio

from rtd import dtypes
from rtd.daemon.serving.pipeline import PipelinedVersion, Plan, Runner, Step
from rtd.daemon.serving.services import TenantServices
from rtd.errors import Code, RtdError
from rtd.proto import model_config_pb2 as mc
from rtd.signature import Signature, TensorSpec


def config_specs(config, tensors) -> tuple:
    """TensorSpecs of a config's inputs or outputs: -1 dims any size, the batch dim first where
    max_batch_size > 0."""
    batch = (None,) if config.max_batch_size > 0 else ()
    specs = []
    for t in tensors:
        row = dtypes.BY_CONFIG.get(mc.DataType.Name(t.data_type))
        if row is None:
            raise RtdError(Code.E_CONFIG_INVALID, f"tensor {t.name!r}: data_type {mc.DataType.Name(t.data_type)}")
        specs.append(TensorSpec(t.name, row.wire, batch + tuple(d if d >= 0 else None for d in t.dims)))
    return tuple(specs)


class EnsembleVersion(PipelinedVersion):
    """One verified ensemble package: its checked plan and the runner of its requests."""
    runs_steps = True   # a pipeline itself: never an ensemble's step

    def __init__(self, owner, package, held, services: TenantServices):
        self.owner, self.package, self.held, self.services = owner, package, held, services
        config = package.config
        self.max_batch = config.max_batch_size if config.max_batch_size > 0 else 0
        self.signature = Signature(config_specs(config, config.input), config_specs(config, config.output))
        self.instances: list = []            # none of its own: its steps' instances serve it
        self.count = self.crashes = self.restarting = self.measured = self.evictions = 0
        self.users, self.retired, self.last_reason = 0, False, ""
        self.live = asyncio.Event()
        self.scheduler = self                # requests are submitted to the ensemble itself
        self.runner: Runner | None = None
        self.models: list[tuple[str, str]] = []   # per step in running order: (model name, version asked, "" any)

    @property
    def version_dir(self) -> str:
        return self.package.version_dir

    def estimate(self) -> int:
        return 0

    # -- loading -------------------------------------------------------------------------------
    async def start(self) -> None:
        """Check the steps against the tenant's loaded models; E_ENSEMBLE_INVALID on anything amiss."""
        config, name = self.package.config, self.owner.name
        if not config.input or not config.output:
            raise RtdError(Code.E_ENSEMBLE_INVALID, f"{name}: an ensemble's config.pbtxt declares its inputs and outputs")
        steps, signatures, models = [], [], []
        for i, step in enumerate(config.ensemble_scheduling.step):
            if not step.model_name:
                raise RtdError(Code.E_ENSEMBLE_INVALID, f"{name}: step {i + 1} names no model")
            if step.model_namespace:
                raise RtdError(Code.E_ENSEMBLE_INVALID, f"{name}: step {step.model_name!r}: model namespaces are not offered")
            if step.model_name == name:
                raise RtdError(Code.E_ENSEMBLE_INVALID, f"{name}: step {i + 1} is the ensemble itself (a cycle)")
            asked = str(step.model_version) if step.model_version > 0 else ""
            version = self._step_version(step.model_name, asked, Code.E_ENSEMBLE_INVALID)
            steps.append(Step(step.model_name, dict(step.input_map), dict(step.output_map)))
            signatures.append(version.signature)
            models.append((step.model_name, asked))
        plan = Plan.check(name, self.signature.inputs, self.signature.outputs, steps, signatures)
        by_label = dict(models)
        self.models = [(s.label, by_label[s.label]) for s in plan.steps]
        metrics, tenant = self.services.metrics, self.services.tenant
        self.runner = Runner(plan, self.version_dir, self._resolve, metrics,
                             lambda version: metrics.find(tenant, version.owner.name, version.version_dir))
        self.live.set()

    def _step_version(self, model_name: str, asked: str, code: Code):
        """The version of the tenant's model `model_name` a step runs (refused with `code` when
        there is none: another tenant's name is not found, as any unknown name)."""
        model = self.services.models(model_name) if self.services.models is not None else None
        if model is None:
            raise RtdError(code, f"{self.owner.name}: step {model_name!r}: no such model is loaded for this tenant")
        try:
            version = model.version_for(asked)
        except RtdError as e:
            raise RtdError(e.code if code is Code.E_MODEL_UNAVAILABLE else code,
                           f"{self.owner.name}: step {model_name!r}: {e.detail}") from None
        if getattr(version, "runs_steps", False):
            raise RtdError(code, f"{self.owner.name}: step {model_name!r} runs steps itself (an ensemble or a staged "
                                 "model): an ensemble's steps are single models")
        return version

    def _resolve(self, index: int):
        name, asked = self.models[index]
        return self._step_version(name, asked, Code.E_MODEL_UNAVAILABLE)

    # -- serving -------------------------------------------------------------------------------
    def evict(self, instance) -> None:
        pass

    def stop(self, reason: str) -> None:
        self.retired = True
        self.live.clear()

    def view(self) -> dict:
        steps = []
        for name, asked in self.models:
            model = self.services.models(name) if self.services.models is not None else None
            steps.append({"model": name, "version": asked or (model.serving.version_dir if model and model.serving else ""),
                          "state": model.state.value if model is not None else "NOT_LOADED"})
        return {"version": self.version_dir, "semver": self.package.version, "instances": [], "configured_instances": 0,
                "crashes_in_a_row": 0, "resource_errors_in_window": 0, "resident_bytes": 0, "evictions": 0,
                "ensemble": steps}
