"""An ONNX model parsed without its weights: the protobuf parser (upb) copies every byte it is given
into its own arena (and, given a memoryview, into a bytes object first), so parsing a worker's model
from its memfd took two more copies of it. Here the main graph's initializers' raw_data fields
(ModelProto.graph = 7, GraphProto.initializer = 5, TensorProto.name = 8, raw_data = 9) are left out of
the bytes the parser sees, their offsets kept, so the weights stay where they are: the ONNX guard
(loader/onnx_guard.py) hands them to the worker as views of its sealed memfd, the only copy. Only the
protobuf wire format is read here (rtd/protowire.py's bounded walker); a subgraph's weights and a
Constant's value stay in the proto.
"""
import collections
from typing import NamedTuple

from rtd.errors import Code
from rtd.protowire import LENGTH, Walker, encode_varint

COPY_WORTH_BYTES = 16 << 20   # a copy of the rest of the model this small costs nothing worth weighing


def stripped(data) -> tuple[object, dict[str, tuple[int, int]]]:
    """The model's bytes with the main graph's initializers' raw_data left out, and {name: (offset, length)}
    of the raw_data each of those had in `data` (the last occurrence of a field wins, as protobuf parses
    it). An initializer without a name, or with a name two initializers share (in one graph field or
    across two, which the parser merges), keeps its raw_data: which bytes a shared name means is the
    parser's to decide. Where the rest is past COPY_WORTH_BYTES and larger than what would be left out (a
    tree ensemble's node lists), `data` itself and no spans: a copy of the rest would cost more than the
    parser's copy of the weights. Malformed wire data is E_ONNX_PARSE."""
    walker = Walker(data, Code.E_ONNX_PARSE)
    buf, end = walker.buf, len(walker.buf)
    graphs, pos = [], 0   # per graph field: where it starts and ends, and its initializers (_initializers)
    while pos < end:
        start = pos
        number, wire, value, pos = walker.field(pos, end)
        if number == 7 and wire == LENGTH:
            graphs.append((start, pos, value, _initializers(walker, value)))
    named = collections.Counter(t.name for *_, tensors in graphs for t in tensors)
    spans = {t.name: t.raw for *_, tensors in graphs for t in tensors
             if t.raw is not None and t.name is not None and named[t.name] == 1}
    rest = end - sum(length for _, length in spans.values())
    if not spans or rest > max(end - rest, COPY_WORTH_BYTES):
        return data, {}
    out, copied = bytearray(), 0
    for start, stop, (body_start, body_end), tensors in graphs:
        pieces, at = [], body_start   # the graph's bytes less the spans' fields: byte ranges of buf, and keys
        for t in tensors:
            if t.name in spans:
                pieces += [(at, t.start), _key_and_length(5, sum(b - a for a, b in t.kept)), *t.kept]
                at = t.stop
        pieces.append((at, body_end))
        out += buf[copied:start]
        out += _key_and_length(7, sum(map(_size, pieces)))
        for piece in pieces:
            out += buf[piece[0]:piece[1]] if isinstance(piece, tuple) else piece
        copied = stop
    out += buf[copied:end]
    return out, spans


def _size(piece) -> int:
    return piece[1] - piece[0] if isinstance(piece, tuple) else len(piece)


def _key_and_length(number: int, length: int) -> bytes:
    return encode_varint(number << 3 | LENGTH) + encode_varint(length)


class _Initializer(NamedTuple):
    """One GraphProto.initializer field: where it lies, its name, its raw_data's (offset, length), and the byte
    ranges of its other fields."""
    start: int
    stop: int
    name: str | None
    raw: tuple | None
    kept: list


def _initializers(walker: Walker, span: tuple[int, int]) -> list:
    """A GraphProto's initializer fields, in order."""
    buf, tensors = walker.buf, []
    pos, end = span
    while pos < end:
        start = pos
        number, wire, value, pos = walker.field(pos, end)
        if number != 5 or wire != LENGTH:
            continue
        name, raw, kept, field_pos = None, None, [], value[0]
        while field_pos < value[1]:
            field_start = field_pos
            field, field_wire, field_value, field_pos = walker.field(field_pos, value[1])
            if field_wire == LENGTH and field == 9:
                raw = (field_value[0], field_value[1] - field_value[0])
                continue
            if field_wire == LENGTH and field == 8:
                name = bytes(buf[field_value[0]:field_value[1]]).decode("utf-8", "replace")
            kept.append((field_start, field_pos))
        tensors.append(_Initializer(start, pos, name, raw, kept))
    return tensors
