"""KServe v2 tensors ↔ NumPy, validated before anything is allocated (datatypes from the
one table, rtd.dtypes).

Every input's datatype, rank and dims are checked, and the byte size a shape × dtype
implies is computed with exact integers and compared with the bytes (or typed elements)
actually present before an array is built. Raw contents are wrapped, not copied. BYTES
elements are 4-byte little-endian length prefixed, as in Triton's binary tensor extension.
Mixing raw_input_contents and typed contents in one request is refused. REST's JSON
`data` is turned into raw bytes first (`raw_from_json`), so both fronts share one check. A response is
built as parts — the message without its raw contents, then each output's field header
and bytes — so an output goes from the worker's arena into the outgoing frames with one
copy.
"""
import numpy as np

from rtd import dtypes
from rtd.errors import Code, RtdError
from rtd.proto import grpc_service_pb2 as pb

MAX_RANK = 16
RAW_OUTPUT_FIELD = 6   # ModelInferResponse.raw_output_contents
JSON_KINDS = {"b": "b", "i": "iu", "u": "iu", "f": "iuf"}   # NumPy kinds of JSON values each kind accepts


def _bad(detail: str) -> RtdError:
    return RtdError(Code.E_REQUEST_INVALID, detail)


def _shape(tensor, max_bytes: int) -> tuple[tuple, int]:
    if len(tensor.shape) > MAX_RANK:
        raise _bad(f"input {tensor.name!r}: rank {len(tensor.shape)} exceeds {MAX_RANK}")
    count = dtypes.element_count(tensor.shape)
    if count is None:
        raise _bad(f"input {tensor.name!r}: shape {list(tensor.shape)[:MAX_RANK]} has a negative or overlarge dim")
    if count * max(dtypes.BY_KSERVE[tensor.datatype].itemsize, 1) > max_bytes:
        raise _bad(f"input {tensor.name!r}: shape {list(tensor.shape)} exceeds the {max_bytes}-byte limit")
    return tuple(tensor.shape), count


def _decode_raw(tensor, raw: bytes, max_bytes: int) -> np.ndarray:
    shape, count = _shape(tensor, max_bytes)
    row = dtypes.BY_KSERVE[tensor.datatype]
    if row.wire == "bytes":
        flat = dtypes.decode_bytes(raw, count)
        if isinstance(flat, str):
            raise _bad(f"input {tensor.name!r}: {flat}")
        return flat.reshape(shape)
    if len(raw) != count * row.itemsize:
        raise _bad(f"input {tensor.name!r}: {len(raw)} bytes, shape {list(shape)} × {tensor.datatype} needs "
                   f"{count * row.itemsize}")
    return np.frombuffer(raw, dtype=row.numpy).reshape(shape)


def _decode_typed(tensor, max_bytes: int) -> np.ndarray:
    shape, count = _shape(tensor, max_bytes)
    row = dtypes.BY_KSERVE[tensor.datatype]
    if row.typed_field is None:
        raise _bad(f"input {tensor.name!r}: {tensor.datatype} travels only as raw contents")
    for other in {d.typed_field for d in dtypes.TABLE if d.typed_field} - {row.typed_field}:
        if len(getattr(tensor.contents, other)):
            raise _bad(f"input {tensor.name!r}: {other} given for a {tensor.datatype} tensor")
    values = getattr(tensor.contents, row.typed_field)
    if len(values) != count:
        raise _bad(f"input {tensor.name!r}: {len(values)} elements, shape {list(shape)} needs {count}")
    if row.wire == "bytes":
        out = np.empty(count, dtype=object)
        out[:] = list(values)
        return out.reshape(shape)
    try:
        return np.array(values, dtype=row.numpy).reshape(shape)
    except OverflowError:
        raise _bad(f"input {tensor.name!r}: a value does not fit {tensor.datatype}") from None


def _check_parameters(tensor, raw: bytes | None) -> None:
    """Tensor parameters: only `binary_data_size`, which KServe's gRPC client sends with raw
    contents (a REST extension's name) and which must then say the raw length; anything else
    (shared memory regions, ...) is refused."""
    for key, value in tensor.parameters.items():
        if key != "binary_data_size":
            raise _bad(f"input {tensor.name!r}: tensor parameter {key!r} (shared memory, ...) is not offered")
        if value.WhichOneof("parameter_choice") != "int64_param" or raw is None or value.int64_param != len(raw):
            raise _bad(f"input {tensor.name!r}: binary_data_size must be the length of its raw contents")


def decode_request(request: pb.ModelInferRequest, max_bytes: int) -> dict:
    """The request's inputs as {name: ndarray}; INVALID_ARGUMENT on any inconsistency."""
    raw = request.raw_input_contents
    typed = any(t.HasField("contents") for t in request.inputs)
    if raw and typed:
        raise _bad("raw_input_contents and typed contents cannot be mixed")
    if raw and len(raw) != len(request.inputs):
        raise _bad(f"{len(raw)} raw_input_contents for {len(request.inputs)} inputs")
    raw = list(raw) if raw else [None] * len(request.inputs)
    for tensor, data in zip(request.inputs, raw):
        _check_parameters(tensor, data)
    return decode_inputs(request.inputs, raw, max_bytes)


def decode_inputs(tensors, raw: list, max_bytes: int) -> dict:
    """Inputs ({name, datatype, shape} each) as {name: ndarray}: from raw[i] (bytes-like),
    or from the tensor's typed contents where raw[i] is None."""
    out = {}
    for tensor, data in zip(tensors, raw):
        if tensor.name in out:
            raise _bad(f"input {tensor.name!r} given twice")
        if tensor.datatype not in dtypes.BY_KSERVE:
            raise _bad(f"input {tensor.name!r}: unknown datatype {tensor.datatype!r}")
        out[tensor.name] = _decode_typed(tensor, max_bytes) if data is None else _decode_raw(tensor, data, max_bytes)
    return out


def raw_from_json(name: str, datatype: str, data) -> bytes:
    """A REST tensor's JSON `data` (row-major, nested or flat) as the raw bytes of `datatype`;
    decode_inputs then checks them against the shape. Values must be of the datatype's kind
    (no float for an INT32, no number for BYTES) and fit it."""
    row = dtypes.BY_KSERVE.get(datatype)
    if row is None:
        raise _bad(f"input {name!r}: unknown datatype {datatype!r}")
    if not isinstance(data, list):
        raise _bad(f"input {name!r}: data must be a JSON array")
    if row.wire == "bytes":
        flat = np.array(data, dtype=object).reshape(-1)
        if not all(isinstance(x, str) for x in flat):
            raise _bad(f"input {name!r}: BYTES data must be strings")
        return dtypes.encode_bytes(flat)
    try:
        a = np.array(data)
    except (ValueError, OverflowError):
        raise _bad(f"input {name!r}: data is ragged or holds values of no single type") from None
    if a.size and a.dtype.kind not in JSON_KINDS[row.numpy.kind]:
        raise _bad(f"input {name!r}: data holds values that are not {datatype}")
    if a.size and row.numpy.kind in "iu":
        info = np.iinfo(row.numpy)
        if a.min() < info.min or a.max() > info.max:
            raise _bad(f"input {name!r}: a value does not fit {datatype}")
    return a.astype(row.numpy).tobytes()


def json_data(value) -> list:
    """An output as REST JSON `data`: flat, row-major; BYTES elements as UTF-8 strings."""
    flat = np.asarray(value).reshape(-1)
    if flat.dtype.kind not in "OSU":
        return flat.tolist()
    try:
        return [x.decode() if isinstance(x, bytes) else str(x) for x in flat]
    except UnicodeDecodeError:
        raise _bad("a BYTES output is not UTF-8: ask for it as binary_data") from None


def raw_bytes(name: str, value) -> tuple[dtypes.DType, object]:
    """An array's KServe row and its raw bytes (a flat view where the array allows it)."""
    a = np.asarray(value)
    row = dtypes.of_numpy(a.dtype)
    if row is None:
        raise RtdError(Code.E_INTERNAL, f"tensor {name!r} has dtype {a.dtype}")
    if row.wire == "bytes":
        return row, dtypes.encode_bytes(a)
    if a.dtype != row.numpy or not a.flags.c_contiguous:
        a = np.array(a, dtype=row.numpy, order="C")
    return row, a.reshape(-1).view(np.uint8)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def response_parts(model_name: str, version: str, request_id: str, outputs: dict) -> list:
    """A serialized ModelInferResponse as parts: the message without its raw contents, then
    for each output the raw_output_contents field header and the output's bytes. Protobuf
    merges repeated fields across concatenated serializations, so the parts are one message."""
    response = pb.ModelInferResponse(model_name=model_name, model_version=version, id=request_id)
    parts = []
    for name, value in outputs.items():
        row, raw = raw_bytes(name, value)
        response.outputs.add(name=name, datatype=row.kserve, shape=list(np.shape(value)))
        parts += [bytes([RAW_OUTPUT_FIELD << 3 | 2]) + _varint(memoryview(raw).nbytes), raw]
    return [response.SerializeToString(), *parts]


def encode_inputs(inputs: dict) -> tuple[list, list]:
    """Client side (rtctl): {name: ndarray} → (InferInputTensor list, raw contents list)."""
    tensors, raw = [], []
    for name, value in inputs.items():
        try:
            row, data = raw_bytes(name, value)
        except RtdError:
            raise _bad(f"input {name!r}: dtype {np.asarray(value).dtype} has no KServe datatype") from None
        tensors.append(pb.ModelInferRequest.InferInputTensor(name=name, datatype=row.kserve, shape=list(np.shape(value))))
        raw.append(bytes(data))
    return tensors, raw


def decode_response(response: pb.ModelInferResponse) -> dict:
    """Client side (rtctl): raw outputs back to arrays."""
    out = {}
    for i, t in enumerate(response.outputs):
        fake = pb.ModelInferRequest.InferInputTensor(name=t.name, datatype=t.datatype, shape=list(t.shape))
        out[t.name] = _decode_raw(fake, response.raw_output_contents[i], 1 << 62)
    return out
