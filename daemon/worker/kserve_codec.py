"""KServe v2 requests and responses as the tenant's worker reads and writes them.

The supervisor passes a request's body on unread — a serialized ModelInferRequest (gRPC), or
a REST body (its JSON inference header, then the binary tensors the header sizes) — and
sends back what this module builds, so every step proportional to a payload happens here,
inside the tenant's confinement and charged to its cgroups. Decoding checks each input's
datatype, rank and dims, computes the bytes its shape implies with exact integers and
compares them with what is present before anything is allocated; raw tensors are viewed in
place, never copied; BYTES elements and JSON values are counted against caps before they
are materialised. A response is built as parts: the message (or JSON) without the raw
outputs, then each output's bytes.
"""
import dataclasses
import json

import numpy as np
from google.protobuf.message import DecodeError

from rtd import dtypes, jsondoc
from rtd.errors import Code, RtdError
from rtd.jsondoc import field
from rtd.infer_request import declared_inputs, scan, tensor_shape
from rtd.proto import PROFILE_PARAMETER
from rtd.proto import grpc_service_pb2 as pb
from rtd.tensors import json_data, raw_bytes, raw_from_json, response_parts



def _bad(detail: str) -> RtdError:
    return RtdError(Code.E_REQUEST_INVALID, detail)


@dataclasses.dataclass(frozen=True)
class Caps:
    """What one request may make the worker decode."""
    max_bytes: int                  # bytes of one tensor (the message limit)
    max_elements: int = 1 << 22     # BYTES elements and JSON values of one request, all tensors together


@dataclasses.dataclass
class Request:
    id: str
    inputs: dict                    # name -> ndarray
    outputs: list | None            # names asked for; None: all
    binary: dict                    # REST: output name -> sent as binary data
    binary_all: bool = False        # REST: binary_data_output
    profile: bool = False
    timeout_us: int = 0             # REST's timeout parameter (gRPC's is read by the supervisor)

    @property
    def rows(self) -> int:
        first = next(iter(self.inputs.values()), None)
        return int(first.shape[0]) if first is not None and first.ndim else 1


class _Budget:
    """Elements a request may still materialise (BYTES elements, JSON values)."""

    def __init__(self, caps: Caps):
        self.caps, self.left = caps, caps.max_elements

    def take(self, count: int, what: str) -> None:
        self.left -= count
        if self.left < 0:
            raise RtdError(Code.E_MESSAGE_TOO_LARGE, f"{what}: more than {self.caps.max_elements} elements or values in one "
                                                     "request (send numbers as raw binary tensors)")


def array_from_raw(name: str, declared: tuple, raw, budget: _Budget | None) -> np.ndarray:
    """A tensor from its raw bytes (a view of them, for every type but BYTES); `declared` is
    its (dtype row, shape, element count); BYTES elements count against `budget` (None: they
    were counted already, as the JSON values they came from)."""
    row, shape, count = declared
    if row.wire == "bytes":
        if budget is not None:
            budget.take(count, f"input {name!r}")
        flat = dtypes.decode_bytes(raw, count)
        if isinstance(flat, str):
            raise _bad(f"input {name!r}: {flat}")
        return flat.reshape(shape)
    if len(raw) != count * row.itemsize:
        raise _bad(f"input {name!r}: {len(raw)} bytes, shape {list(shape)} × {row.kserve} needs {count * row.itemsize}")
    return np.frombuffer(raw, dtype=row.numpy).reshape(shape)


def _array_from_typed(name: str, declared: tuple, contents: bytes, budget: _Budget) -> np.ndarray:
    row, shape, count = declared
    datatype = row.kserve
    try:
        message = pb.InferTensorContents.FromString(contents)
    except DecodeError:
        raise _bad(f"input {name!r}: its contents are not an InferTensorContents message") from None
    for given, _ in message.ListFields():
        if given.name != row.typed_field:
            raise _bad(f"input {name!r}: {given.name} given for a {datatype} tensor")
    values = getattr(message, row.typed_field)
    if len(values) != count:
        raise _bad(f"input {name!r}: {len(values)} elements, shape {list(shape)} needs {count}")
    if row.wire == "bytes":
        budget.take(count, f"input {name!r}")
        out = np.empty(count, dtype=object)
        out[:] = list(values)
        return out.reshape(shape)
    try:
        return np.array(values, dtype=row.numpy).reshape(shape)
    except OverflowError:
        raise _bad(f"input {name!r}: a value does not fit {datatype}") from None


def decode_grpc(body, caps: Caps) -> Request:
    """A serialized ModelInferRequest as a Request; E_REQUEST_INVALID on any inconsistency."""
    view = memoryview(body).cast("B")
    head = scan(view)
    declared, budget, inputs = declared_inputs(head, caps.max_bytes), _Budget(caps), {}
    for i, tensor in enumerate(head.inputs):
        if head.raw:
            inputs[tensor.name] = array_from_raw(tensor.name, declared[tensor.name], view[slice(*head.raw[i])], budget)
        else:
            contents = bytes(view[slice(*tensor.contents)]) if tensor.contents else b""
            inputs[tensor.name] = _array_from_typed(tensor.name, declared[tensor.name], contents, budget)
    profile = head.parameters.get(PROFILE_PARAMETER)
    return Request(head.id, inputs, [o.name for o in head.outputs] or None, {}, profile=profile is True)


def decode_rest(body, json_length: int | None, caps: Caps) -> Request:
    """A REST inference body: its JSON header (the first `json_length` bytes, all of it
    without), then the binary tensors it sizes in input order, which must use up the rest."""
    view = memoryview(body).cast("B")
    split = len(view) if json_length is None else json_length
    if not 0 <= split <= len(view):
        raise _bad("inference-header-content-length is not a length within the body")
    budget = _Budget(caps)
    header = bytes(view[:split])
    budget.take(jsondoc.values_in(header), "the inference header")
    doc = jsondoc.parse(header, "the inference header")   # counted above, against the request's budget
    binary, offset, inputs = view[split:], 0, {}
    for i, given in enumerate(field(doc, "inputs", list, "request")):
        where = f"inputs[{i}]"
        if not isinstance(given, dict):
            raise _bad(f"{where}: expected an object")
        name, datatype = field(given, "name", str, where), field(given, "datatype", str, where)
        shape = field(given, "shape", list, where)
        if not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
            raise _bad(f"{where}.shape: expected a list of integers")
        parameters = field(given, "parameters", dict, where, {})
        if set(parameters) - {"binary_data_size"}:
            raise _bad(f"{where}: tensor parameters other than binary_data_size (shared memory, ...) are not offered")
        if name in inputs:
            raise _bad(f"input {name!r} given twice")
        if "binary_data_size" in parameters:
            size = field(parameters, "binary_data_size", int, where)
            if "data" in given or not 0 <= size <= len(binary) - offset:
                raise _bad(f"{where}: binary_data_size {size} with data, or past the binary part")
            raw, counted = binary[offset:offset + size], budget
            offset += size
        else:
            raw, counted = raw_from_json(name, datatype, field(given, "data", list, where)), None
        inputs[name] = array_from_raw(name, tensor_shape(name, datatype, shape, caps.max_bytes), raw, counted)
    if offset != len(binary):
        raise _bad(f"{len(binary) - offset} bytes after the inference header that no input claims")
    parameters = field(doc, "parameters", dict, "request", {})
    binary_all = field(parameters, "binary_data_output", bool, "parameters", False)
    timeout = field(parameters, "timeout", int, "parameters", 0)   # tritonclient's client_timeout, microseconds
    if not 0 <= timeout < 1 << 63:
        raise _bad("parameters.timeout: microseconds, 0 to 2^63")
    wanted = {}
    for i, out in enumerate(field(doc, "outputs", list, "request", [])):
        where = f"outputs[{i}]"
        if not isinstance(out, dict):
            raise _bad(f"{where}: expected an object")
        given = field(out, "parameters", dict, where, {})
        if set(given) - {"binary_data"}:
            raise _bad(f"{where}: output parameters other than binary_data (classification, ...) are not offered")
        wanted[field(out, "name", str, where)] = field(given, "binary_data", bool, where, binary_all)
    return Request(field(doc, "id", str, "request", ""), inputs, list(wanted) or None, wanted, binary_all,
                   field(parameters, PROFILE_PARAMETER, bool, "parameters", False), timeout)


def encode_grpc(model: str, version: str, request: Request, outputs: dict) -> tuple[list, None]:
    """A serialized ModelInferResponse as parts (raw outputs after the message's header)."""
    return response_parts(model, version, request.id, outputs), None


def encode_rest(model: str, version: str, request: Request, outputs: dict, max_values: int) -> tuple[list, int | None]:
    """The REST response: its JSON, then the binary outputs after it; (parts, the JSON's
    length when binary parts follow it, else None)."""
    head = {"id": request.id} if request.id else {}
    head.update(model_name=model, model_version=version, outputs=[])
    parts = []
    for name, value in outputs.items():
        row, raw = raw_bytes(name, value)
        entry = {"name": name, "datatype": row.kserve, "shape": list(np.shape(value))}
        if request.binary.get(name, request.binary_all):
            entry["parameters"] = {"binary_data_size": memoryview(raw).nbytes}
            parts.append(raw)
        elif np.size(value) > max_values:
            raise RtdError(Code.E_MESSAGE_TOO_LARGE, f"output {name!r} has more than {max_values} values: "
                                                     "ask for it as binary_data")
        else:
            entry["data"] = json_data(value)
        head["outputs"].append(entry)
    text = json.dumps(head).encode()
    return [text, *parts], (len(text) if parts else None)

