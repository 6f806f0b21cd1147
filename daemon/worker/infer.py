"""One INFER frame in the worker: the requests the supervisor passed on unread, each decoded
(kserve_codec), run — together where the model batches and their shapes agree — and answered
with its own response or its own refusal, so one bad request never fails its neighbours.

A frame's head names each request's encoding and its tensor in the frame (the request body
as bytes), and the limits the supervisor keeps: the response size, the batch size, the
elements a request may make the worker materialise. The answer's head has one result per
request, in order — `{"rows", "json_length"}` for a response (its bytes are the frame's
tensor of the same name) or `{"code", "detail"}` — and the time spent decoding, running and
encoding, for the supervisor's phase counters.
"""
import json
import time

import numpy as np

from rtd import wire
from rtd.daemon.worker import kserve_codec
from rtd.errors import Code, RtdError
from rtd.kernels.profile import Profile
from rtd.proto import TRACE_OUTPUT

MAX_TRACE_EVENTS = 4000     # a profiled run's trace, as one BYTES output
MAX_JSON_OUTPUT_VALUES = 1 << 20
ENCODINGS = ("grpc", "rest")


def _refusal(e: BaseException) -> tuple[Code, str]:
    if isinstance(e, RtdError):
        return e.code, e.detail[:500]
    if isinstance(e, MemoryError):
        return Code.E_RESOURCE_EXHAUSTED, "allocation failed"
    return Code.E_INTERNAL, f"{type(e).__name__}: {e}"[:200]


class Serving:
    """What a worker serves and within which limits (from its LOAD frame). `refuse(code,
    detail) -> dict` makes a request's refusal (the worker names calls its filter refused)."""

    def __init__(self, model, name: str, version: str, caps: kserve_codec.Caps, max_response_bytes: int, max_batch: int,
                 refuse=lambda code, detail: {"code": code.name, "detail": detail}):
        self.model, self.name, self.version, self.refuse = model, name, version, refuse
        self.caps, self.max_response_bytes, self.max_batch = caps, max_response_bytes, max_batch
        self.outputs = [spec.name for spec in model.outputs]

    def _decode(self, spec: dict, frame: wire.Frame) -> kserve_codec.Request:
        if not isinstance(spec, dict) or spec.get("encoding") not in ENCODINGS or spec.get("tensor") not in frame.tensors:
            raise RtdError(Code.E_WORKER_PROTOCOL, "INFER: a request entry without its encoding or body")
        body = frame.tensors[spec["tensor"]]
        if spec["encoding"] == "grpc":
            request = kserve_codec.decode_grpc(body, self.caps)
        else:
            json_length = spec.get("json_length")
            if json_length is not None and type(json_length) is not int:
                raise RtdError(Code.E_WORKER_PROTOCOL, "INFER: json_length")
            request = kserve_codec.decode_rest(body, json_length, self.caps)
            if request.timeout_us and time.monotonic() > spec.get("received", 0) + request.timeout_us / 1e6:
                raise RtdError(Code.E_DEADLINE, "the request's timeout passed before it ran")
        for name in request.outputs or ():
            if name not in self.outputs:
                raise RtdError(Code.E_INPUT_INVALID, f"{self.name} has no output {name[:100]!r}")
        if self.max_batch > 0 and (not request.inputs or any(a.ndim == 0 for a in request.inputs.values()) or
                                   len({a.shape[0] for a in request.inputs.values()}) != 1 or
                                   not 0 < request.rows <= self.max_batch):
            raise RtdError(Code.E_INPUT_INVALID, f"{self.name} batches along dim 0: the inputs' first dims must agree "
                                                 f"and be 1..{self.max_batch}")
        return request

    def answer(self, frame: wire.Frame) -> tuple[dict, dict]:
        """The answer to an INFER frame: (head, {name: Blob})."""
        specs = frame.head.get("requests")
        if not isinstance(specs, list) or not 0 < len(specs) <= max(self.max_batch, 1):
            raise RtdError(Code.E_WORKER_PROTOCOL, "INFER: requests is not a list within the batch size")
        started = time.perf_counter_ns()
        results, decoded = [None] * len(specs), {}
        for i, spec in enumerate(specs):
            try:
                decoded[i] = self._decode(spec, frame)
            except Exception as e:   # this request's refusal, not its neighbours'
                results[i] = self.refuse(*_refusal(e))
        decoding = time.perf_counter_ns()
        outputs = {}
        for group in self._groups(decoded):
            try:
                outputs.update(self._run(group, decoded))
            except Exception as e:
                for i in group:
                    results[i] = self.refuse(*_refusal(e))
        running = time.perf_counter_ns()
        blobs = {}
        for i, values in outputs.items():
            request = decoded[i]
            try:
                size = sum(v.nbytes if v.dtype.kind not in "OSU" else sum(len(x) + 4 for x in v.reshape(-1))
                           for v in values.values())
                if size > self.max_response_bytes:
                    raise RtdError(Code.E_MESSAGE_TOO_LARGE, f"the outputs take {size} bytes, max_message_bytes is "
                                                             f"{self.max_response_bytes}")
                if specs[i]["encoding"] == "grpc":
                    parts, json_length = kserve_codec.encode_grpc(self.name, self.version, request, values)
                else:
                    parts, json_length = kserve_codec.encode_rest(self.name, self.version, request, values,
                                                                  MAX_JSON_OUTPUT_VALUES)
                blobs[str(i)] = wire.Blob(parts)
                results[i] = {"rows": request.rows, "json_length": json_length}
            except Exception as e:
                results[i] = self.refuse(*_refusal(e))
        ns = {"decode": decoding - started, "run": running - decoding, "encode": time.perf_counter_ns() - running}
        return {"results": results, "ns": ns}, blobs

    def _groups(self, decoded: dict) -> list:
        """Requests that run as one execution: those whose inputs agree in everything but
        the batch dim, up to max_batch rows; a profiled request runs alone."""
        if self.max_batch <= 0:
            return [[i] for i in decoded]
        groups, open_groups = [], {}
        for i, request in decoded.items():
            if request.profile:
                groups.append([i])
                continue
            key = tuple((n, a.dtype.str, a.shape[1:]) for n, a in sorted(request.inputs.items()))
            group = open_groups.get(key)
            rows = request.rows
            if group is None or group[1] + rows > self.max_batch:
                group = open_groups[key] = [[], 0]
                groups.append(group[0])
            group[0].append(i)
            group[1] += rows
        return groups

    def _run(self, group: list, decoded: dict) -> dict:
        """{request index: {output name: array}} of one execution."""
        requests = [decoded[i] for i in group]
        if len(requests) == 1:
            return {group[0]: self._outputs(requests[0], self._execute(requests[0]))}
        inputs = {n: np.concatenate([r.inputs[n] for r in requests]) for n in requests[0].inputs}
        results = self.model.run(inputs)
        rows = sum(r.rows for r in requests)
        if any(np.ndim(v) == 0 or len(v) != rows for v in results.values()):
            raise RtdError(Code.E_MODEL_INVALID, f"{self.name}: an output does not keep the batch dimension")
        out, start = {}, 0
        for i, request in zip(group, requests):
            out[i] = self._outputs(request, {n: v[start:start + request.rows] for n, v in results.items()})
            start += request.rows
        return out

    def _execute(self, request: kserve_codec.Request) -> dict:
        if not request.profile:
            return self.model.run(request.inputs)
        if TRACE_OUTPUT in self.outputs:
            raise RtdError(Code.E_REQUEST_INVALID, f"the model has an output named {TRACE_OUTPUT!r}: cannot profile")
        record = Profile()
        results = self.model.run(request.inputs, record=record)
        document = json.dumps({"traceEvents": record.events()[:MAX_TRACE_EVENTS], "displayTimeUnit": "ms"}).encode()
        return {**results, TRACE_OUTPUT: np.array([document], dtype=object)}

    @staticmethod
    def _outputs(request: kserve_codec.Request, results: dict) -> dict:
        wanted = request.outputs
        if wanted:
            if TRACE_OUTPUT in results:
                wanted = [*wanted, TRACE_OUTPUT]
            results = {name: results[name] for name in wanted if name in results}
        return {name: np.asarray(v) for name, v in results.items()}
