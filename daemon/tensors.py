"""KServe v2 tensors ↔ NumPy, validated before anything is allocated.

Every input's datatype, rank and dims are checked, and the byte size a shape × dtype
implies is computed with exact integers and compared with the bytes (or typed elements)
actually present before an array is built. Raw contents are wrapped, not copied. BYTES
elements are 4-byte little-endian length prefixed, as in Triton's binary tensor extension.
Mixing raw_input_contents and typed contents in one request is refused.
"""
import struct

import numpy as np

from rtd.errors import Code, RtdError
from rtd.proto import grpc_service_pb2 as pb

MAX_RANK = 16
DATATYPES = {
    "BOOL": np.dtype(np.bool_), "UINT8": np.dtype("<u1"), "UINT16": np.dtype("<u2"), "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"), "INT8": np.dtype("<i1"), "INT16": np.dtype("<i2"), "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"), "FP16": np.dtype("<f2"), "FP32": np.dtype("<f4"), "FP64": np.dtype("<f8"),
    "BYTES": np.dtype(object),
}
BY_NUMPY = {dt.name: name for name, dt in DATATYPES.items()}
TYPED_FIELD = {
    "BOOL": "bool_contents", "UINT8": "uint_contents", "UINT16": "uint_contents", "UINT32": "uint_contents",
    "UINT64": "uint64_contents", "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
    "INT64": "int64_contents", "FP32": "fp32_contents", "FP64": "fp64_contents", "BYTES": "bytes_contents",
}
CONFIG_TYPES = {"TYPE_" + ("STRING" if k == "BYTES" else k): k for k in DATATYPES}


def _bad(detail: str) -> RtdError:
    return RtdError(Code.E_REQUEST_INVALID, detail)


def datatype_of(dtype_name: str | None) -> str:
    return BY_NUMPY.get(dtype_name or "", "BYTES" if dtype_name == "object" else "")


def _shape(tensor, max_bytes: int) -> tuple[tuple, int]:
    if len(tensor.shape) > MAX_RANK:
        raise _bad(f"input {tensor.name!r}: rank {len(tensor.shape)} exceeds {MAX_RANK}")
    count = 1
    for d in tensor.shape:
        if d < 0:
            raise _bad(f"input {tensor.name!r}: negative dim {d}")
        count *= d
    if count * max(DATATYPES[tensor.datatype].itemsize, 1) > max_bytes:
        raise _bad(f"input {tensor.name!r}: shape {list(tensor.shape)} exceeds the {max_bytes}-byte limit")
    return tuple(tensor.shape), count


def _decode_bytes(raw: bytes, count: int, name: str) -> np.ndarray:
    out, view, pos = np.empty(count, dtype=object), memoryview(raw), 0
    for i in range(count):
        if pos + 4 > len(view):
            raise _bad(f"input {name!r}: BYTES element {i} truncated")
        (n,) = struct.unpack_from("<I", view, pos)
        if pos + 4 + n > len(view):
            raise _bad(f"input {name!r}: BYTES element {i} longer than the data")
        out[i] = bytes(view[pos + 4: pos + 4 + n])
        pos += 4 + n
    if pos != len(view):
        raise _bad(f"input {name!r}: {len(view) - pos} bytes after the last BYTES element")
    return out


def _decode_raw(tensor, raw: bytes, max_bytes: int) -> np.ndarray:
    shape, count = _shape(tensor, max_bytes)
    dtype = DATATYPES[tensor.datatype]
    if tensor.datatype == "BYTES":
        return _decode_bytes(raw, count, tensor.name).reshape(shape)
    if len(raw) != count * dtype.itemsize:
        raise _bad(f"input {tensor.name!r}: {len(raw)} bytes, shape {list(shape)} × {tensor.datatype} needs "
                   f"{count * dtype.itemsize}")
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


def _decode_typed(tensor, max_bytes: int) -> np.ndarray:
    shape, count = _shape(tensor, max_bytes)
    field = TYPED_FIELD.get(tensor.datatype)
    if field is None:
        raise _bad(f"input {tensor.name!r}: {tensor.datatype} travels only as raw contents")
    for other in set(TYPED_FIELD.values()) - {field}:
        if len(getattr(tensor.contents, other)):
            raise _bad(f"input {tensor.name!r}: {other} given for a {tensor.datatype} tensor")
    values = getattr(tensor.contents, field)
    if len(values) != count:
        raise _bad(f"input {tensor.name!r}: {len(values)} elements, shape {list(shape)} needs {count}")
    dtype = DATATYPES[tensor.datatype]
    if tensor.datatype == "BYTES":
        out = np.empty(count, dtype=object)
        out[:] = list(values)
        return out.reshape(shape)
    try:
        return np.array(values, dtype=dtype).reshape(shape)
    except OverflowError:
        raise _bad(f"input {tensor.name!r}: a value does not fit {tensor.datatype}") from None


def decode_request(request: pb.ModelInferRequest, max_bytes: int) -> dict:
    """The request's inputs as {name: ndarray}; INVALID_ARGUMENT on any inconsistency."""
    raw = request.raw_input_contents
    typed = any(t.HasField("contents") for t in request.inputs)
    if raw and typed:
        raise _bad("raw_input_contents and typed contents cannot be mixed")
    if raw and len(raw) != len(request.inputs):
        raise _bad(f"{len(raw)} raw_input_contents for {len(request.inputs)} inputs")
    out = {}
    for i, tensor in enumerate(request.inputs):
        if tensor.name in out:
            raise _bad(f"input {tensor.name!r} given twice")
        if tensor.datatype not in DATATYPES:
            raise _bad(f"input {tensor.name!r}: unknown datatype {tensor.datatype!r}")
        if tensor.parameters:
            raise _bad(f"input {tensor.name!r}: tensor parameters (shared memory, ...) are not offered")
        out[tensor.name] = _decode_raw(tensor, raw[i], max_bytes) if raw else _decode_typed(tensor, max_bytes)
    return out


def encode_bytes(a: np.ndarray) -> bytes:
    parts = []
    for item in a.reshape(-1):
        b = item if isinstance(item, bytes) else str(item).encode()
        parts += [struct.pack("<I", len(b)), b]
    return b"".join(parts)


def encode_response(response: pb.ModelInferResponse, results: dict) -> None:
    """Append every result as an output with raw_output_contents (what tritonclient reads)."""
    for name, value in results.items():
        a = np.asarray(value)
        datatype = datatype_of(a.dtype.name)
        if not datatype:
            raise RtdError(Code.E_INTERNAL, f"output {name!r} has dtype {a.dtype}")
        response.outputs.add(name=name, datatype=datatype, shape=list(a.shape))
        response.raw_output_contents.append(encode_bytes(a) if datatype == "BYTES"
                                            else np.ascontiguousarray(a, a.dtype.newbyteorder("<")).tobytes())


def encode_inputs(inputs: dict) -> tuple[list, list]:
    """Client side (rtctl): {name: ndarray} → (InferInputTensor list, raw contents list)."""
    tensors, raw = [], []
    for name, value in inputs.items():
        a = np.asarray(value)
        datatype = datatype_of(a.dtype.name)
        if not datatype:
            raise _bad(f"input {name!r}: dtype {a.dtype} has no KServe datatype")
        tensors.append(pb.ModelInferRequest.InferInputTensor(name=name, datatype=datatype, shape=list(a.shape)))
        raw.append(encode_bytes(a) if datatype == "BYTES" else np.ascontiguousarray(a, a.dtype.newbyteorder("<")).tobytes())
    return tensors, raw


def decode_response(response: pb.ModelInferResponse) -> dict:
    """Client side (rtctl): raw outputs back to arrays."""
    out = {}
    for i, t in enumerate(response.outputs):
        fake = pb.ModelInferRequest.InferInputTensor(name=t.name, datatype=t.datatype, shape=list(t.shape))
        out[t.name] = _decode_raw(fake, response.raw_output_contents[i], 1 << 62)
    return out
