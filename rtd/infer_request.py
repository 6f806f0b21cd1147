"""A KServe v2 `ModelInferRequest` read from its protobuf wire form without touching its
tensors: the header (model, version, id, parameters, each input's name, datatype and shape,
the outputs asked for) and where each tensor's bytes lie in the message.

The supervisor reads this much of a request and no more, so what it does per request is
bounded whatever the payload: every field is visited at most once, at most MAX_FIELDS of
them, and a tensor's contents are skipped by their length (only their first field's number
is read, so a tensor whose typed contents are of another type is refused at once). The
worker uses the same reading to find the bytes it decodes. Unknown fields are skipped, as
protobuf does; anything malformed is E_REQUEST_INVALID.

Field numbers are those of rtd/proto/grpc_service.proto (Triton's).
"""
import dataclasses
import struct

from rtd import dtypes
from rtd.errors import Code, RtdError
from rtd.protowire import FIXED64, LENGTH, VARINT, Walker

MAX_FIELDS = 1 << 14     # fields visited in one request, all levels together
MAX_TENSORS = 1024       # inputs, outputs or raw contents of one request
MAX_PARAMETERS = 64      # parameters of the request or of one tensor
MAX_TEXT = 1 << 16       # bytes of a name, datatype, id or string parameter
MAX_RANK = 16
_DOUBLE = struct.Struct("<d")
TYPED_FIELD_NUMBER = {"bool_contents": 1, "int_contents": 2, "int64_contents": 3, "uint_contents": 4, "uint64_contents": 5,
                      "fp32_contents": 6, "fp64_contents": 7, "bytes_contents": 8}   # InferTensorContents


def _bad(detail: str) -> RtdError:
    return RtdError(Code.E_REQUEST_INVALID, detail)


@dataclasses.dataclass
class TensorHead:
    name: str = ""
    datatype: str = ""
    shape: tuple = ()
    parameters: dict = dataclasses.field(default_factory=dict)
    contents: tuple | None = None     # (start, end) of its InferTensorContents in the message
    contents_field: int = 0           # the number of that message's first field (0: empty)


@dataclasses.dataclass
class OutputHead:
    name: str = ""
    parameters: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class InferHead:
    model_name: str = ""
    model_version: str = ""
    id: str = ""
    parameters: dict = dataclasses.field(default_factory=dict)
    inputs: list = dataclasses.field(default_factory=list)     # TensorHead, in message order
    outputs: list = dataclasses.field(default_factory=list)    # OutputHead
    raw: list = dataclasses.field(default_factory=list)        # (start, end) of each raw_input_contents


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _parameter(r: Walker, span, what: str):
    """An InferParameter's one value (bool, int, str or float)."""
    value = None
    for number, wire, v in r.fields(*span):
        if number == 1:
            r.expect(wire, VARINT, what)
            value = bool(v)
        elif number in (2, 5):
            r.expect(wire, VARINT, what)
            value = _signed(v) if number == 2 else v
        elif number == 3:
            r.expect(wire, LENGTH, what)
            value = r.text(v, what, MAX_TEXT)
        elif number == 4:
            r.expect(wire, FIXED64, what)
            value = _DOUBLE.unpack_from(r.buf, v[0])[0]
    return value


def _map_entry(r: Walker, span, into: dict, what: str) -> None:
    if len(into) >= MAX_PARAMETERS:
        raise _bad(f"{what} has more than {MAX_PARAMETERS} parameters")
    key, value = "", None
    for number, wire, v in r.fields(*span):
        if number == 1:
            r.expect(wire, LENGTH, what)
            key = r.text(v, f"{what}: a parameter name", MAX_TEXT)
        elif number == 2:
            r.expect(wire, LENGTH, what)
            value = _parameter(r, v, f"{what}: parameter {key[:64]!r}")
    into[key] = value


def _input(r: Walker, span) -> TensorHead:
    t = TensorHead()
    shape = []
    for number, wire, v in r.fields(*span):
        if number == 1:
            r.expect(wire, LENGTH, "an input's name")
            t.name = r.text(v, "an input's name", MAX_TEXT)
        elif number == 2:
            r.expect(wire, LENGTH, "an input's datatype")
            t.datatype = r.text(v, "an input's datatype", MAX_TEXT)
        elif number == 3:
            if wire == VARINT:
                shape.append(_signed(v))
            else:
                r.expect(wire, LENGTH, "an input's shape")
                pos, end = v
                while pos < end and len(shape) <= MAX_RANK:
                    dim, pos = r.varint(pos, end)
                    shape.append(_signed(dim))
            if len(shape) > MAX_RANK:
                raise _bad(f"input {t.name[:64]!r}: rank over {MAX_RANK}")
        elif number == 4:
            r.expect(wire, LENGTH, "an input's parameters")
            _map_entry(r, v, t.parameters, f"input {t.name[:64]!r}")
        elif number == 5:
            r.expect(wire, LENGTH, "an input's contents")
            t.contents = v
            start, end = v
            t.contents_field = r.varint(start, end)[0] >> 3 if end > start else 0
    t.shape = tuple(shape)
    return t


def _output(r: Walker, span) -> OutputHead:
    o = OutputHead()
    for number, wire, v in r.fields(*span):
        if number == 1:
            r.expect(wire, LENGTH, "an output's name")
            o.name = r.text(v, "an output's name", MAX_TEXT)
        elif number == 2:
            r.expect(wire, LENGTH, "an output's parameters")
            _map_entry(r, v, o.parameters, f"output {o.name[:64]!r}")
    return o


def scan(message) -> InferHead:
    """The header of a serialized ModelInferRequest (any bytes-like) and its tensors' places."""
    r, head = Walker(message, Code.E_REQUEST_INVALID, MAX_FIELDS), InferHead()
    for number, wire, v in r.fields(0, len(r.buf)):
        if number in (1, 2, 3):
            r.expect(wire, LENGTH, "model_name, model_version or id")
            text = r.text(v, ("model_name", "model_version", "id")[number - 1], MAX_TEXT)
            if number == 1:
                head.model_name = text
            elif number == 2:
                head.model_version = text
            else:
                head.id = text
        elif number == 4:
            r.expect(wire, LENGTH, "parameters")
            _map_entry(r, v, head.parameters, "the request")
        elif number in (5, 6, 7):
            r.expect(wire, LENGTH, "inputs, outputs or raw_input_contents")
            items = (head.inputs, head.outputs, head.raw)[number - 5]
            if len(items) >= MAX_TENSORS:
                raise _bad(f"more than {MAX_TENSORS} inputs, outputs or raw contents")
            items.append(_input(r, v) if number == 5 else _output(r, v) if number == 6 else v)
    return head


def tensor_shape(name: str, datatype: str, shape, max_bytes: int) -> tuple[dtypes.DType, tuple, int]:
    """(dtype row, shape, element count) of a tensor's header, or E_REQUEST_INVALID: a known
    datatype, rank at most MAX_RANK, dims whose product an array can have, and at most
    `max_bytes` of data (BYTES counted at one byte an element)."""
    row = dtypes.BY_KSERVE.get(datatype)
    if row is None:
        raise _bad(f"input {name!r}: unknown datatype {datatype[:32]!r}")
    if len(shape) > MAX_RANK:
        raise _bad(f"input {name!r}: rank {len(shape)} exceeds {MAX_RANK}")
    count = dtypes.element_count(shape)
    if count is None:
        raise _bad(f"input {name!r}: shape {list(shape)[:MAX_RANK]} has a negative or overlarge dim")
    if count * max(row.itemsize, 1) > max_bytes:
        raise _bad(f"input {name!r}: shape {list(shape)} exceeds the {max_bytes}-byte limit")
    return row, tuple(shape), count


def declared_inputs(head: InferHead, max_bytes: int) -> dict:
    """{name: (dtype row, shape, element count)} of a request's inputs, each checked from its
    header alone (O(1) a tensor): tensor_shape's checks; raw contents of exactly the bytes the
    shape needs (BYTES: 4 at least per element); typed contents in the datatype's own field;
    raw and typed contents not mixed; only `binary_data_size` as a tensor parameter, saying
    the raw length. E_REQUEST_INVALID otherwise."""
    typed = any(t.contents is not None for t in head.inputs)
    if head.raw and typed:
        raise _bad("raw_input_contents and typed contents cannot be mixed")
    if head.raw and len(head.raw) != len(head.inputs):
        raise _bad(f"{len(head.raw)} raw_input_contents for {len(head.inputs)} inputs")
    out = {}
    for i, t in enumerate(head.inputs):
        if t.name in out:
            raise _bad(f"input {t.name!r} given twice")
        row, shape, count = tensor_shape(t.name, t.datatype, t.shape, max_bytes)
        raw = head.raw[i][1] - head.raw[i][0] if head.raw else None
        for key, value in t.parameters.items():
            if key != "binary_data_size":
                raise _bad(f"input {t.name!r}: tensor parameter {key[:64]!r} (shared memory, ...) is not offered")
            if type(value) is not int or raw is None or value != raw:
                raise _bad(f"input {t.name!r}: binary_data_size must be the length of its raw contents")
        if raw is not None:
            if row.wire == "bytes" and raw < 4 * count:
                raise _bad(f"input {t.name!r}: {count} BYTES elements cannot fit in {raw} bytes")
            if row.wire != "bytes" and raw != count * row.itemsize:
                raise _bad(f"input {t.name!r}: {raw} bytes, shape {list(shape)} × {t.datatype} needs {count * row.itemsize}")
        elif row.typed_field is None:
            raise _bad(f"input {t.name!r}: {t.datatype} travels only as raw contents")
        elif t.contents_field and t.contents_field != TYPED_FIELD_NUMBER[row.typed_field]:
            raise _bad(f"input {t.name!r}: contents of another type given for a {t.datatype} tensor")
        out[t.name] = (row, shape, count)
    return out
