"""An ONNX model parsed without its weights: the protobuf parser (upb) copies every byte it is given
into its own arena (and, given a memoryview, into a bytes object first), so parsing a worker's model
from its memfd took two more copies of it. Here the main graph's initializers' raw_data fields
(ModelProto.graph = 7, GraphProto.initializer = 5, TensorProto.name = 8, raw_data = 9) are left out of
the bytes the parser sees, their offsets kept, so the weights stay where they are: the ONNX guard
(loader/onnx_guard.py) hands them to the worker as views of its sealed memfd, the only copy. Only the
protobuf wire format is read here (rtd/protowire.py's bounded walker); a subgraph's weights and a
Constant's value stay in the proto.
"""
import numpy as np
import onnx
from onnx import TensorProto

from rtd.errors import Code
from rtd.protowire import LENGTH, Walker, encode_varint

# ONNX element types NumPy can view in place (little-endian, whole bytes per element)
VIEWABLE = {t: np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t)).newbyteorder("<") for t in (
    TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BOOL, TensorProto.INT8, TensorProto.UINT8,
    TensorProto.INT16, TensorProto.UINT16, TensorProto.INT32, TensorProto.UINT32, TensorProto.INT64, TensorProto.UINT64)}

COPY_WORTH_BYTES = 16 << 20   # a copy of the rest of the model this small costs nothing worth weighing


def stripped(data) -> tuple[object, dict[str, tuple[int, int]]]:
    """The model's bytes with the main graph's initializers' raw_data left out, and {name: (offset, length)}
    of the raw_data each of those had in `data` (the last occurrence of a field wins, as protobuf parses
    it). An initializer without a name, or with a name two initializers share, keeps its raw_data: which
    bytes a shared name means is the parser's to decide. Where the rest is past COPY_WORTH_BYTES and larger
    than what would be left out (a tree ensemble's node lists), `data` itself and no spans: a copy of the
    rest would cost more than the parser's copy of the weights. Malformed wire data is E_ONNX_PARSE."""
    walker = Walker(data, Code.E_ONNX_PARSE)
    buf, end = walker.buf, len(walker.buf)
    pieces, spans, copied, pos = [], {}, 0, 0   # pieces: byte ranges of `buf` and bytes, in order
    while pos < end:
        start = pos
        number, wire, value, pos = walker.field(pos, end)
        if number == 7 and wire == LENGTH:
            graph = _graph(walker, value, spans)
            pieces += [(copied, start), _key_and_length(7, sum(_size(p) for p in graph)), *graph]
            copied = pos
    pieces.append((copied, end))
    rest = end - sum(length for _, length in spans.values())
    if rest > max(end - rest, COPY_WORTH_BYTES):
        return data, {}
    out = bytearray()
    for piece in pieces:
        out += buf[piece[0]:piece[1]] if isinstance(piece, tuple) else piece
    return out, spans


def _size(piece) -> int:
    return piece[1] - piece[0] if isinstance(piece, tuple) else len(piece)


def _key_and_length(number: int, length: int) -> bytes:
    return encode_varint(number << 3 | LENGTH) + encode_varint(length)


def _graph(walker: Walker, span: tuple[int, int], spans: dict) -> list:
    """A GraphProto's pieces with its named initializers' raw_data left out, their spans added to `spans`."""
    buf = walker.buf
    tensors = []   # per initializer field: (start, end, name, raw_data span, the spans of its other fields)
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
        tensors.append((start, pos, name, raw, kept))
    names = [name for _, _, name, _, _ in tensors]
    shared = {name for name in names if names.count(name) > 1} if len(set(names)) < len(names) else set()
    pieces, copied = [], span[0]
    for start, stop, name, raw, kept in tensors:
        if raw is None or name is None or name in shared or name in spans:   # spans: a graph field seen before
            continue
        spans[name] = raw
        pieces += [(copied, start), _key_and_length(5, sum(b - a for a, b in kept)), *kept]
        copied = stop
    pieces.append((copied, span[1]))
    return pieces
