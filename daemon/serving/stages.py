"""A model served as K pipeline stages (config.pbtxt parameter `rtd_stages`, `rtctl pack
--stages K`): K versions of the same signed package, each confined worker serving one part of
the graph with its share of the tenant's threads, run as a pipeline (pipeline.Runner) so that K
requests are in flight at once, one per stage.

The supervisor never parses the graph: the first stage's worker measures the model, cuts it
(kernels/stages.py) and states the cut in its LOAD answer; the supervisor checks that answer's
shape (bounded, like any worker answer: a wrong one refuses the load), starts the other stages
with it, keeps it for restarts (every stage's worker takes the same cut again) and checks the
stages' signatures as a pipeline's (pipeline.Plan). Each stage has its own instances, scheduler
and batching (the model's instance_group and dynamic_batching, per stage); a stage's crash
counts toward the model's crash_limit; `rtctl status` shows the cut and each stage's time.
"""
import asyncio

from rtd.daemon.observe.metrics import Series
from rtd.daemon.serving.lifecycle import ModelVersion
from rtd.daemon.serving.pipeline import PipelinedVersion, Plan, Runner, Step
from rtd.daemon.serving.services import TenantServices
from rtd.errors import Code, RtdError
from rtd.kernels.stages import MAX_STAGES
from rtd.signature import Signature

STAGES_PARAMETER = "rtd_stages"
CUT_PARAMETER = "rtd_stage_cut"   # "cost" (the default) or "nodes": equal node counts, to compare against


def stage_count(config) -> int:
    """The stages a config asks for (1: not staged)."""
    if config is None or STAGES_PARAMETER not in config.parameters:
        return 1
    text = config.parameters[STAGES_PARAMETER].string_value
    if not text.isdigit() or not 1 <= int(text) <= MAX_STAGES:
        raise RtdError(Code.E_CONFIG_INVALID, f"parameter {STAGES_PARAMETER}: {text[:20]!r} is not a count of 1..{MAX_STAGES}")
    return int(text)


def cut_by(config) -> str:
    if config is None or CUT_PARAMETER not in config.parameters:
        return "cost"
    by = config.parameters[CUT_PARAMETER].string_value
    if by not in ("cost", "nodes"):
        raise RtdError(Code.E_CONFIG_INVALID, f"parameter {CUT_PARAMETER}: {by[:20]!r} is not cost or nodes")
    return by


def _report(doc, count: int) -> dict:
    """The first stage's statement of its cut, as far as the supervisor reads it."""
    if (not isinstance(doc, dict) or not isinstance(doc.get("cut"), dict) or not isinstance(doc.get("stages"), list)
            or len(doc["stages"]) != count or not all(isinstance(s, dict) for s in doc["stages"])):
        raise RtdError(Code.E_WORKER_PROTOCOL, "the first stage's LOAD answer has no cut of the stages asked for")
    return doc


class _StageOwner:
    """What a stage's ModelVersion asks of its owner: a name, the staged model's state, and
    where its changes go (the staged version, which answers for all its stages)."""

    def __init__(self, staged: "StagedVersion", index: int):
        self.staged, self.name = staged, f"{staged.owner.name}.stage{index + 1}"

    @property
    def state(self):
        return self.staged.owner.state

    @property
    def reason(self) -> str:
        return self.staged.owner.reason

    def version_changed(self, version) -> None:
        self.staged.stage_changed()


class StagedVersion(PipelinedVersion):
    """One verified package served as K stages."""
    runs_steps = True   # a pipeline itself: never an ensemble's step

    def __init__(self, owner, package, held, services: TenantServices):
        self.owner, self.package, self.held, self.services = owner, package, held, services
        config = package.config
        self.count, self.by = stage_count(config), cut_by(config)
        self.max_batch = config.max_batch_size if config is not None and config.max_batch_size > 0 else 0
        self.signature: Signature | None = None
        self.stages: list[ModelVersion] = []
        self.served = [Series() for _ in range(self.count)]   # each stage's requests and phases, since load
        self.users, self.retired, self.evictions = 0, False, 0
        self.live = asyncio.Event()
        self.scheduler = self
        self.runner: Runner | None = None
        self.report: dict = {}

    @property
    def version_dir(self) -> str:
        return self.package.version_dir

    @property
    def instances(self) -> list:
        return [i for stage in self.stages for i in stage.instances]

    @property
    def crashes(self) -> int:
        return max((stage.crashes for stage in self.stages), default=0)

    @property
    def restarting(self) -> int:
        return sum(stage.restarting for stage in self.stages)

    @property
    def last_reason(self) -> str:
        return next((stage.last_reason for stage in self.stages if stage.last_reason), "")

    @property
    def measured(self) -> int:
        return sum(stage.measured for stage in self.stages)

    @measured.setter
    def measured(self, value: int) -> None:
        pass   # a reload's stages measure themselves again (ManagedModel.reload hands the old figure on)

    def estimate(self) -> int:
        return sum(stage.estimate() for stage in self.stages)

    def pids_estimate(self) -> int:
        """Processes and threads one of its instances holds, as its largest stage's do."""
        return max((stage.pids_estimate() for stage in self.stages), default=0)

    # -- loading -------------------------------------------------------------------------------
    def _stage(self, index: int, cut: dict | None) -> ModelVersion:
        threads = max(1, self.services.threads // self.count)   # the tenant's cores, shared out
        spec = {"count": self.count, "index": index, "by": self.by, **({"cut": cut} if cut is not None else {})}
        return ModelVersion(_StageOwner(self, index), self.package, self.held, self.services,
                            load_extra={"threads": threads, "stages": spec})

    async def start(self) -> None:
        """The first stage cuts the model; the others start with its cut; the whole is checked
        as a pipeline. On failure nothing of it keeps running."""
        try:
            first = self._stage(0, None)
            self.stages = [first]
            await first.start()
            report = _report(first.load_reply.get("stages"), self.count)
            first.load_extra["stages"]["cut"] = report["cut"]   # a restart takes the same cut
            self.signature = Signature.parse(report.get("signature"))
            rest = [self._stage(k, report["cut"]) for k in range(1, self.count)]
            self.stages += rest
            await asyncio.gather(*(stage.start() for stage in rest))
            steps = [Step(f"stage {k + 1}/{self.count}", {s.name: s.name for s in stage.signature.inputs},
                          {s.name: s.name for s in stage.signature.outputs}) for k, stage in enumerate(self.stages)]
            plan = Plan.check(self.owner.name, self.signature.inputs, self.signature.outputs, steps,
                              [stage.signature for stage in self.stages])
        except BaseException:
            self.stop("load failed")
            raise
        by_label = {step.label: (k, stage) for k, (step, stage) in enumerate(zip(steps, self.stages))}
        order = [by_label[step.label] for step in plan.steps]
        self.runner = Runner(plan, self.version_dir, lambda i: order[i][1], self.services.metrics,
                             lambda stage: self.served[self.stages.index(stage)])
        self.report = report
        self.live.set()
        self.services.emit("stages", model=self.owner.name, version=self.version_dir, count=self.count,
                           ranges=";".join(f"{a}-{b}" for a, b in report["cut"]["ranges"]),
                           bottleneck_ms=report.get("bottleneck_ms"), method=report.get("method"))

    def stage_changed(self) -> None:
        if not self.stages or self.runner is None:
            return
        if all(stage.live.is_set() or (not stage.instances and not stage.restarting) for stage in self.stages):
            self.live.set()
        else:
            self.live.clear()
        self.owner.version_changed(self)

    # -- serving -------------------------------------------------------------------------------
    def evict(self, instance) -> None:
        for stage in self.stages:
            if instance in stage.instances:
                self.evictions += 1
                stage.evict(instance)

    def stop(self, reason: str) -> None:
        self.retired = True
        for stage in self.stages:
            stage.stop(reason)
        self.live.clear()

    def view(self) -> dict:
        stages = []
        for k, stage in enumerate(self.stages):
            cut = (self.report.get("stages") or [{}] * self.count)[k]
            served = self.served[k]
            stages.append({"stage": k + 1, "nodes": cut.get("nodes"), "ops": cut.get("ops"),
                           "estimated_ms": cut.get("estimated_ms"), "measured_ms": cut.get("measured_ms"),
                           "hands_on_bytes": cut.get("hands_on_bytes"), "requests": served.success,
                           "mean_compute_ms": round(served.infer_ns / served.success / 1e6, 3) if served.success else None,
                           "instances": [i.view() for i in stage.instances]})
        return {"version": self.version_dir, "semver": self.package.version, "instances": [i.view() for i in self.instances],
                "configured_instances": sum(stage.count for stage in self.stages), "crashes_in_a_row": self.crashes,
                "resource_errors_in_window": sum(len(stage.resource_errors) for stage in self.stages),
                "resident_bytes": self.measured, "evictions": self.evictions,
                "stages": {"count": self.count, "method": self.report.get("method"),
                           "bottleneck_ms": self.report.get("bottleneck_ms"),
                           "node_count_bottleneck_ms": self.report.get("node_count_bottleneck_ms"),
                           "node_count_ranges": self.report.get("node_count_ranges"),
                           "crossing_bytes": self.report.get("crossing_bytes"), "stages": stages}}
