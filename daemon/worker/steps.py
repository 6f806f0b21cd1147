"""A request entry that is one step of a pipeline (an ensemble's step, or a stage of a model cut
into stages): what the supervisor asks of it beyond a plain request, and the tensors it hands on.

A pipeline's first step decodes the client's request (gRPC or REST) as any request is decoded,
checks it against the pipeline's own inputs (`expect`), feeds its model the inputs mapped to it
(`feed`: {model input: client input}) and hands on, each in a sealed memfd of its own, the
outputs later steps read (`keep`), the client's inputs other steps read (`keep_inputs`) and the
client's request itself (what the last step answers: its id, the outputs asked for, REST's
binary choices) as a small JSON tensor. A later step reads its inputs from such memfds
(`"encoding": "tensors"`, `inputs`: {model input: frame tensor}); the supervisor passed their
fds on unread. The last step answers the client in the client's encoding (`respond`), as the
pipeline (`as`: its name and version), from its own outputs renamed (`rename`: {model output:
pipeline output}) and the earlier steps' outputs it is handed (`carry`: {pipeline output:
frame tensor}), in the pipeline's order (`order`).
"""
import dataclasses
import json

import numpy as np

from rtd import dtypes, wire
from rtd.daemon.worker import kserve_codec
from rtd.errors import Code, RtdError
from rtd.signature import TensorSpec, check_tensors

ENCODINGS = ("grpc", "rest")
STEP_KEYS = frozenset({"feed", "expect", "inputs", "keep", "keep_inputs", "keep_request", "respond", "as", "rename",
                       "carry", "request", "order"})
MAX_REQUEST_JSON = 1 << 20


def _protocol(detail: str) -> RtdError:
    return RtdError(Code.E_WORKER_PROTOCOL, f"INFER step: {detail}")


def _names(value, what: str) -> list:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _protocol(f"{what} is not a list of names")
    return value


def _mapping(value, what: str) -> dict:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise _protocol(f"{what} is not a map of names")
    return value


@dataclasses.dataclass
class Step:
    respond: str                      # "grpc" | "rest": answer the client; "tensors": hand them on
    feed: dict | None = None          # first step: {model input: client input}
    expect: tuple = ()                # first step: the pipeline's inputs (TensorSpec)
    expect_outputs: tuple = ()        # first step: the pipeline's output names
    pipeline: str = ""                # the pipeline's name, in refusals
    inputs: dict | None = None        # later steps: {model input: frame tensor}
    keep: list = dataclasses.field(default_factory=list)
    keep_inputs: list = dataclasses.field(default_factory=list)
    keep_request: bool = False
    answer_as: tuple | None = None    # (name, version) the response names
    rename: dict = dataclasses.field(default_factory=dict)
    carry: dict = dataclasses.field(default_factory=dict)
    request: str | None = None        # later steps: the frame tensor holding the client's request
    order: list = dataclasses.field(default_factory=list)


def parse(spec: dict) -> Step | None:
    """The step an INFER entry describes, or None for a plain request."""
    if not STEP_KEYS & set(spec):
        return None
    respond = spec.get("respond", spec.get("encoding"))
    if respond not in (*ENCODINGS, "tensors"):
        raise _protocol("respond")
    step = Step(respond)
    if spec.get("encoding") == "tensors":
        step.inputs = _mapping(spec.get("inputs"), "inputs")
        step.request = spec.get("request")
        if respond != "tensors" and not isinstance(step.request, str):
            raise _protocol("a step that answers the client needs the client's request")
    else:
        step.feed = _mapping(spec.get("feed"), "feed")
        expect = spec.get("expect")
        if not isinstance(expect, dict) or not isinstance(expect.get("inputs"), list) or not isinstance(expect.get("name"), str):
            raise _protocol("expect")
        try:
            step.expect = tuple(TensorSpec(e["name"], e["dtype"], None if e["shape"] is None else tuple(e["shape"]))
                                for e in expect["inputs"])
        except (TypeError, KeyError):
            raise _protocol("expect's inputs") from None
        step.expect_outputs = tuple(_names(expect.get("outputs", []), "expect's outputs"))
        step.pipeline = expect["name"]
    step.keep = _names(spec.get("keep", []), "keep")
    step.keep_inputs = _names(spec.get("keep_inputs", []), "keep_inputs")
    step.keep_request = spec.get("keep_request") is True
    if respond != "tensors":
        answer_as = spec.get("as")
        if not (isinstance(answer_as, list) and len(answer_as) == 2 and all(isinstance(v, str) for v in answer_as)):
            raise _protocol("as")
        step.answer_as = tuple(answer_as)
        step.rename = _mapping(spec.get("rename", {}), "rename")
        step.carry = _mapping(spec.get("carry", {}), "carry")
        step.order = _names(spec.get("order", []), "order")
    return step


def first(step: Step, request: kserve_codec.Request) -> dict:
    """The client's request decoded by the first step: checked against the pipeline's inputs and
    outputs; its inputs become the model's feeds (the request's own `inputs` replaced); returns
    the client's inputs later steps read."""
    check_tensors(step.pipeline, step.expect, {n: (_wire(a), a.shape) for n, a in request.inputs.items()})
    known = set(step.expect_outputs)
    for name in request.outputs or ():
        if name not in known:
            raise RtdError(Code.E_INPUT_INVALID, f"{step.pipeline} has no output {name[:100]!r}")
    if request.profile:
        raise RtdError(Code.E_REQUEST_INVALID, f"{step.pipeline} runs in steps: profile each step's model instead")
    given = request.inputs
    missing = [n for n in (*step.feed.values(), *step.keep_inputs) if n not in given]
    if missing:
        raise _protocol(f"the pipeline has no input {missing[0][:100]!r}")
    request.inputs = {model_input: given[name] for model_input, name in step.feed.items()}
    return {name: given[name] for name in step.keep_inputs}


def later(step: Step, frame: wire.Frame) -> kserve_codec.Request:
    """A later step's request: its feeds from the frame's tensors, the client's request (id,
    outputs asked for, REST choices) from its JSON tensor, where it answers the client."""
    missing = [t for t in (*step.inputs.values(), *step.carry.values(), *([step.request] if step.request else []))
               if t not in frame.tensors]
    if missing:
        raise _protocol(f"no tensor {missing[0][:100]!r} in the frame")
    inputs = {model_input: frame.tensors[t] for model_input, t in step.inputs.items()}
    if step.request is None:
        return kserve_codec.Request("", inputs, None, {})
    raw = frame.tensors[step.request]
    if raw.dtype != np.uint8 or raw.ndim != 1 or raw.size > MAX_REQUEST_JSON:
        raise _protocol("the client's request is not a JSON byte vector")
    try:
        doc = json.loads(raw.tobytes())
        return kserve_codec.Request(doc["id"], inputs, doc["outputs"], doc["binary"], doc["binary_all"])
    except (ValueError, KeyError, TypeError):
        raise _protocol("the client's request is not the JSON a first step writes") from None


def hand_on(index: int, step: Step, request: kserve_codec.Request, values: dict, passed: dict) -> tuple[dict, dict]:
    """(result, {frame tensor: FdTensor}) of a step that hands its tensors on: each in a sealed
    memfd of its own, named `<index>.o.<output>`, `<index>.i.<input>`, `<index>.r`."""
    result, tensors = {"rows": request.rows, "outputs": {}, "inputs": {}}, {}
    try:
        for name in step.keep:
            if name not in values:
                raise RtdError(Code.E_MODEL_INVALID, f"the step's model has no output {name[:100]!r}")
            tensors[f"{index}.o.{name}"] = wire.sealed(name, values[name])
            result["outputs"][name] = f"{index}.o.{name}"
        for name, value in passed.items():
            tensors[f"{index}.i.{name}"] = wire.sealed(name, value)
            result["inputs"][name] = f"{index}.i.{name}"
        if step.keep_request:
            doc = {"id": request.id, "outputs": request.outputs, "binary": request.binary, "binary_all": request.binary_all}
            tensors[f"{index}.r"] = wire.sealed("request", np.frombuffer(json.dumps(doc).encode(), np.uint8))
            result["request"] = f"{index}.r"
    except BaseException:
        for t in tensors.values():
            t.close()
        raise
    return result, tensors


def response_values(step: Step, values: dict, frame: wire.Frame) -> dict:
    """The pipeline's outputs the last step answers with: its own renamed, the earlier steps'
    carried, in the pipeline's order."""
    out = {step.rename[name]: value for name, value in values.items() if name in step.rename}
    out.update({name: frame.tensors[t] for name, t in step.carry.items()})
    order = {name: i for i, name in enumerate(step.order)}
    return dict(sorted(out.items(), key=lambda kv: order.get(kv[0], len(order))))


def _wire(array: np.ndarray) -> str:
    row = dtypes.of_numpy(array.dtype)
    return row.wire if row else str(array.dtype)
