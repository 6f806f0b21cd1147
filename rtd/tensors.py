"""KServe v2 tensors ↔ NumPy bytes (datatypes from the one table, rtd.dtypes), for the worker
that answers requests (daemon/worker/kserve_codec.py) and the client that sends them.

BYTES elements are 4-byte little-endian length prefixed, as in Triton's binary tensor
extension. REST's JSON `data` is turned into raw bytes (`raw_from_json`), so a JSON tensor
and a binary one are checked alike. A gRPC response is built as parts — the message without
its raw contents, then each output's field header and bytes — so each output is copied once,
into the worker's arena, on its way to the client.
"""
import numpy as np

from rtd import dtypes
from rtd.errors import Code, RtdError
from rtd.proto import grpc_service_pb2 as pb
from rtd.protowire import encode_varint

RAW_OUTPUT_FIELD = 6   # ModelInferResponse.raw_output_contents
JSON_KINDS = {"b": "b", "i": "iu", "u": "iu", "f": "iuf"}   # NumPy kinds of JSON values each kind accepts


def _bad(detail: str) -> RtdError:
    return RtdError(Code.E_REQUEST_INVALID, detail)


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


def response_parts(model_name: str, version: str, request_id: str, outputs: dict) -> list:
    """A serialized ModelInferResponse as parts: the message without its raw contents, then
    for each output the raw_output_contents field header and the output's bytes. Protobuf
    merges repeated fields across concatenated serializations, so the parts are one message."""
    response = pb.ModelInferResponse(model_name=model_name, model_version=version, id=request_id)
    parts = []
    for name, value in outputs.items():
        row, raw = raw_bytes(name, value)
        response.outputs.add(name=name, datatype=row.kserve, shape=list(np.shape(value)))
        parts += [bytes([RAW_OUTPUT_FIELD << 3 | 2]) + encode_varint(memoryview(raw).nbytes), raw]
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
        row, raw, shape = dtypes.BY_KSERVE.get(t.datatype), response.raw_output_contents[i], tuple(t.shape)
        count = dtypes.element_count(shape)
        if row is None or count is None:
            raise _bad(f"output {t.name!r}: datatype {t.datatype!r} or shape {list(shape)} is not a tensor's")
        flat = dtypes.decode_bytes(raw, count) if row.wire == "bytes" else np.frombuffer(raw, row.numpy)
        if isinstance(flat, str) or flat.size != count:
            raise _bad(f"output {t.name!r}: its bytes do not fit shape {list(shape)}")
        out[t.name] = flat.reshape(shape)
    return out
