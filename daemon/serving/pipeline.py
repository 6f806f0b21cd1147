"""A pipeline of steps served as one model: an ensemble's steps over the tenant's models, or the
stages of one model cut into parts. Two jobs: check a pipeline's steps and maps once, from
signatures alone (`Plan.check`: no graph is parsed), and run one request through it (`Runner`).

A pipeline names tensors; each step reads some (`input_map`: {step input: pipeline tensor}) and
writes some (`output_map`: {step output: pipeline tensor}). A valid plan writes each tensor once,
never a pipeline input; reads only tensors the pipeline's inputs or an earlier step provide; has
no cycle; produces every pipeline output; and every read and write agrees in type and shape with
the step's signature. A model named by two steps is refused: a step is named by its model, in
statistics and in errors.

A request runs each step through that step's own scheduler (its queue, batching, the tenant's
slots, its instances), so the steps of different requests overlap: while a later step runs
request n, the first runs request n+1. The first step in order decodes the client's request
(only it reads the client's encoding) and hands on what later steps read; each later step gets
its inputs as the sealed memfds the earlier steps' workers wrote, which the supervisor passes
on by fd, unread (worker/steps.py); the last step answers the client as the pipeline, with the
pipeline's outputs. A step's failure ends the request with that step's code, its detail naming
the step; the request's deadline is every step's deadline.
"""
import asyncio
import dataclasses
import time

from rtd import dtypes
from rtd.daemon.observe.metrics import Timing
from rtd.daemon.serving.lifecycle import Retiring
from rtd.daemon.serving.scheduler import Answer, Handed, InferRequest
from rtd.errors import Code, RtdError
from rtd.signature import TensorSpec


def _invalid(pipeline: str, detail: str) -> RtdError:
    return RtdError(Code.E_ENSEMBLE_INVALID, f"{pipeline}: {detail}")


@dataclasses.dataclass(frozen=True)
class Step:
    label: str           # how errors and views name it: its model, or "stage 2/3"
    input_map: dict      # {step input: pipeline tensor}
    output_map: dict     # {step output: pipeline tensor}


def _agree(pipeline: str, where: str, have: TensorSpec, want: TensorSpec) -> None:
    """A tensor written as `have` and read as `want`: the same type and rank, fixed dims equal."""
    if have.dtype is not None and want.dtype is not None and have.dtype != want.dtype:
        raise _invalid(pipeline, f"{where}: {dtypes.kserve_name(have.dtype)} where {dtypes.kserve_name(want.dtype)} is read")
    if have.shape is None or want.shape is None:
        return
    if len(have.shape) != len(want.shape) or any(isinstance(a, int) and isinstance(b, int) and a != b
                                                 for a, b in zip(have.shape, want.shape)):
        raise _invalid(pipeline, f"{where}: shape {list(have.shape)} where {list(want.shape)} is read")


@dataclasses.dataclass
class Plan:
    """A checked pipeline: its steps in an order that runs (each after what it reads)."""
    name: str
    inputs: tuple               # the pipeline's inputs (TensorSpec)
    outputs: tuple              # the pipeline's outputs (TensorSpec)
    steps: list                 # Step, in running order
    signatures: list            # each step's Signature, as checked
    producer: dict              # pipeline tensor -> index of the step writing it (inputs: absent)
    after: list                 # per step, the indices of the steps it waits for

    @classmethod
    def check(cls, name: str, inputs: tuple, outputs: tuple, steps: list, signatures: list) -> "Plan":
        """The plan, or E_ENSEMBLE_INVALID naming the first thing that does not fit."""
        if not steps:
            raise _invalid(name, "no steps")
        labels = {}
        for i, step in enumerate(steps):
            if step.label in labels:
                raise _invalid(name, f"{step.label!r} is named by steps {labels[step.label] + 1} and {i + 1}")
            labels[step.label] = i
        given = {spec.name: spec for spec in inputs}
        written: dict[str, tuple[int, TensorSpec]] = {}
        for i, (step, signature) in enumerate(zip(steps, signatures)):
            sides = {s.name: s for s in signature.outputs}
            for out, tensor in step.output_map.items():
                if out not in sides:
                    raise _invalid(name, f"step {step.label!r} has no output {out!r}")
                if tensor in given:
                    raise _invalid(name, f"step {step.label!r} writes {tensor!r}, an input of the ensemble")
                if tensor in written:
                    raise _invalid(name, f"{tensor!r} is written by steps {steps[written[tensor][0]].label!r} and {step.label!r}")
                written[tensor] = (i, sides[out])
        for step, signature in zip(steps, signatures):
            sides = {s.name: s for s in signature.inputs}
            if set(step.input_map) != set(sides):
                missing, unknown = sorted(set(sides) - set(step.input_map)), sorted(set(step.input_map) - set(sides))
                raise _invalid(name, f"step {step.label!r}: inputs not mapped {missing[:8]}, unknown inputs {unknown[:8]}")
            for model_input, tensor in step.input_map.items():
                have = given.get(tensor) or (written[tensor][1] if tensor in written else None)
                if have is None:
                    raise _invalid(name, f"step {step.label!r} reads {tensor!r}, which no input or step provides")
                _agree(name, f"step {step.label!r} input {model_input!r} ({tensor!r})", have, sides[model_input])
        for spec in outputs:
            if spec.name not in written:
                raise _invalid(name, f"output {spec.name!r} is written by no step")
            _agree(name, f"output {spec.name!r}", written[spec.name][1], spec)
        order = _order(name, steps, {t: i for t, (i, _) in written.items()})
        rank = {i: r for r, i in enumerate(order)}
        producer = {t: rank[i] for t, (i, _) in written.items()}
        ordered = [steps[i] for i in order]
        after = [sorted({producer[t] for t in step.input_map.values() if t in producer}) for step in ordered]
        return cls(name, tuple(inputs), tuple(outputs), ordered, [signatures[i] for i in order], producer, after)

    def reads_later(self, tensor: str, index: int) -> bool:
        """Whether a step after `index`, or the pipeline's answer, reads `tensor`."""
        return (any(tensor in s.input_map.values() for s in self.steps[index + 1:])
                or any(spec.name == tensor for spec in self.outputs))


def _order(name: str, steps: list, producer: dict) -> list:
    """The steps' indices in an order where each follows what it reads (Kahn's); a cycle is refused."""
    needs = [{producer[t] for t in s.input_map.values() if t in producer} for s in steps]
    order, ready = [], [i for i, n in enumerate(needs) if not n]
    while ready:
        i = ready.pop(0)
        order.append(i)
        for j, n in enumerate(needs):
            if i in n:
                n.discard(i)
                if not n and j not in order and j not in ready:
                    ready.append(j)
    if len(order) != len(steps):
        cycle = [steps[i].label for i in range(len(steps)) if i not in order]
        raise _invalid(name, f"the maps make a cycle through steps {cycle[:8]}")
    return order


class StepCall:
    """One step of one request as its frame entry says it (worker/steps.py): what it reads
    and hands on or answers, and its tensors (sealed memfds, passed by fd)."""

    def __init__(self, fields: dict, tensors: dict, hands_on: bool):
        self.fields, self.tensors, self.hands_on = fields, tensors, hands_on

    def entry(self, index: str) -> tuple[dict, dict]:
        renamed = {f"{index}.{name}": value for name, value in self.tensors.items()}
        fields = dict(self.fields)
        for key in ("inputs", "carry"):
            if key in fields:
                fields[key] = {k: f"{index}.{v}" for k, v in fields[key].items()}
        if "request" in fields:
            fields["request"] = f"{index}.{fields['request']}"
        return fields, renamed


class PipelinedVersion(Retiring):
    """What a version served by a Runner (an ensemble, a staged model) answers where a ModelVersion
    answers through its scheduler: it is its own scheduler, its steps' workers report to their own
    versions."""

    owner = runner = None
    retired = False

    async def submit(self, request: InferRequest, timing: Timing) -> Answer:
        if self.retired or self.runner is None:
            raise RtdError(Code.E_MODEL_UNAVAILABLE, f"{self.owner.name} was unloaded")
        return await self.runner.run(request, timing)

    def answered(self) -> None:
        pass

    def close(self) -> None:
        self.retired = True


class Runner:
    """Runs requests through a plan. `resolve(index)` is the version serving step `index` now
    (a ModelVersion's surface: scheduler, signature, max_batch, version_dir, users) or a
    refusal; `series(version)` its metrics series; `metrics` counts each step's request in
    its model's series, as Triton counts an ensemble's composing models."""

    def __init__(self, plan: Plan, version: str, resolve, metrics, series):
        self.plan, self.version, self.resolve, self.metrics, self.series = plan, version, resolve, metrics, series

    async def run(self, request: InferRequest, timing: Timing) -> Answer:
        plan = self.plan
        versions = [self.resolve(i) for i in range(len(plan.steps))]
        for i, version in enumerate(versions):
            if version.signature != plan.signatures[i]:
                raise RtdError(Code.E_MODEL_UNAVAILABLE, f"{plan.name} step {plan.steps[i].label!r}: its model's signature "
                                                         "changed since the ensemble loaded; load the ensemble again")
        state = _Request(plan, request, timing)
        tasks = [asyncio.get_running_loop().create_task(self._step(i, versions[i], state)) for i in range(len(plan.steps))]
        for task in tasks:
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            raise
        finally:
            state.close()
        return tasks[-1].result()

    async def _step(self, index: int, version, state: "_Request"):
        plan, step = self.plan, self.plan.steps[index]
        for before in plan.after[index] if index else ():
            await state.done[before].wait()
        if index:
            await state.done[0].wait()   # the first step decodes what every later one reads
        if index == len(plan.steps) - 1:
            for event in state.done[:-1]:   # the last answers with every step's outputs
                await event.wait()
        call, inputs = self._call(index, state)
        rows = None
        if version.max_batch and inputs:
            first = next(iter(inputs.values()))[1]
            rows = first[0] if first else None
        if index:
            try:
                version.signature.check(step.label, inputs)
            except RtdError as e:
                raise RtdError(e.code, f"{plan.name} step {step.label!r}: {e.detail}") from None
        req = state.request
        step_request = InferRequest(step.label, version.version_dir, req.encoding if index == 0 else "tensors",
                                    req.body if index == 0 else None, req.deadline, inputs if index else None, None,
                                    rows, req.json_length, req.received, step=call)
        if index == 0:
            req.body = None   # in the first step's hands now
        timing = Timing(time.monotonic())
        series = self.series(version)
        if series is not None:
            timing.queue_in(series)
        version.users += 1
        try:
            answer = await version.scheduler.submit(step_request, timing)
        except RtdError as e:
            state.failed(index, timing)
            if series is not None:
                self.metrics.failed(series, "BACKEND" if timing.compute_start is not None else "REJECTED",
                                    time.monotonic() - timing.start)
            raise RtdError(e.code, f"{plan.name} step {step.label!r}: {e.detail}") from None
        finally:
            version.users -= 1
            timing.dequeue()
        if series is not None:
            self.metrics.succeeded(series, timing, answer.rows if version.max_batch else 1, time.monotonic())
        state.finished(index, timing, answer)
        return answer

    def _call(self, index: int, state: "_Request") -> tuple[StepCall, dict]:
        """The step's frame entry and, for a later step, its inputs' (dtype, shape) from the
        memfds handed to it (what the supervisor checks against the step's signature)."""
        plan, step = self.plan, self.plan.steps[index]
        last = index == len(plan.steps) - 1
        fields, tensors, inputs = {}, {}, {}
        if index == 0:
            fields["feed"] = dict(step.input_map)
            fields["expect"] = {"name": plan.name, "inputs": [s.to_json() for s in plan.inputs],
                                "outputs": [s.name for s in plan.outputs]}
            fields["keep_inputs"] = sorted({t for s in plan.steps[1:] for t in s.input_map.values()} & {s.name for s in plan.inputs})
            fields["keep_request"] = not last
        else:
            fields["encoding"] = "tensors"
            fields["inputs"] = {}
            for j, (model_input, tensor) in enumerate(sorted(step.input_map.items())):
                held = state.tensors[tensor]
                fields["inputs"][model_input] = f"i{j}"
                tensors[f"i{j}"] = held
                inputs[model_input] = (held.dtype, tuple(held.shape))
            if last:
                fields["request"], tensors["r"] = "r", state.client
        if last:
            fields["respond"] = state.request.encoding
            fields["as"] = [plan.name, self.version]
            outputs = {s.name for s in plan.outputs}
            fields["rename"] = {o: t for o, t in step.output_map.items() if t in outputs}
            fields["carry"] = {}
            for j, spec in enumerate(plan.outputs):
                if plan.producer[spec.name] != index:
                    fields["carry"][spec.name] = f"c{j}"
                    tensors[f"c{j}"] = state.tensors[spec.name]
            fields["order"] = [s.name for s in plan.outputs]
        else:
            fields["respond"] = "tensors"
            fields["keep"] = sorted(o for o, t in step.output_map.items() if plan.reads_later(t, index))
        return StepCall(fields, tensors, hands_on=not last), inputs


class _Request:
    """One request's way through a plan: the tensors handed on so far, the client's request as
    the first step handed it on, each step's completion, and the phases the whole is counted in."""

    def __init__(self, plan: Plan, request: InferRequest, timing: Timing):
        self.plan, self.request, self.timing = plan, request, timing
        self.tensors: dict = {}     # pipeline tensor -> wire.FdTensor
        self.client = None          # the client's request (JSON in a sealed memfd), from the first step
        self.done = [asyncio.Event() for _ in plan.steps]

    def finished(self, index: int, timing: Timing, answer) -> None:
        step = self.plan.steps[index]
        if index == 0:
            self.timing.compute_start, self.timing.input_end = timing.compute_start, timing.input_end
            self.timing.decode_s = timing.decode_s
            self.timing.dequeue()
        if isinstance(answer, Handed):
            missing = [o for o in answer.outputs if o not in step.output_map]
            if missing:
                raise RtdError(Code.E_WORKER_PROTOCOL, f"{self.plan.name} step {step.label!r} handed on {missing[0][:100]!r}")
            self.tensors.update({step.output_map[o]: t for o, t in answer.outputs.items()})
            if index == 0:
                self.tensors.update({n: t for n, t in answer.inputs.items() if n in {s.name for s in self.plan.inputs}})
                self.client = answer.request
            needed = [t for t in self._reads_after(index) if t not in self.tensors]
            if index == 0:
                given = {s.name for s in self.plan.inputs}
                needed += [t for s in self.plan.steps[1:] for t in s.input_map.values() if t in given and t not in self.tensors]
            if needed or (index == 0 and self.client is None):
                raise RtdError(Code.E_WORKER_PROTOCOL, f"{self.plan.name} step {step.label!r} did not hand on "
                                                       f"{(needed or ['the request'])[0][:100]!r}")
        else:
            self.timing.output_start, self.timing.encode_s = timing.output_start, timing.encode_s
        self.done[index].set()

    def _reads_after(self, index: int) -> list:
        """The tensors steps after `index` read, or the answer carries, that `index` was to hand on."""
        return [t for t, i in self.plan.producer.items() if i == index and self.plan.reads_later(t, index)]

    def failed(self, index: int, timing: Timing) -> None:
        if index == 0 and timing.compute_start is not None:
            self.timing.compute_start = timing.compute_start

    def close(self) -> None:
        for tensor in (*self.tensors.values(), *([self.client] if self.client is not None else [])):
            tensor.close()
        self.tensors, self.client = {}, None

