"""The one dtype table: each tensor type rtd moves, by its wire name (NumPy's), its KServe v2
datatype, its Triton config enum and the InferTensorContents field that carries it typed.

BYTES tensors are NumPy object arrays of `bytes`; on every wire they travel as Triton's
binary form (each element a 4-byte little-endian length, then its bytes). Shapes are read
here too: `element_count` of a request's shape, `declared_dims` of a model's declared one.
"""
import dataclasses
import struct

import numpy as np


@dataclasses.dataclass(frozen=True)
class DType:
    wire: str                 # NumPy's name; "bytes" for BYTES
    kserve: str               # KServe v2 / Triton datatype string
    config: str               # Triton model_config DataType enum name
    numpy: np.dtype           # little-endian; object for BYTES
    typed_field: str | None   # InferTensorContents field, None where only raw contents exist

    @property
    def itemsize(self) -> int:
        """Bytes per element; 0 for BYTES (variable length)."""
        return 0 if self.wire == "bytes" else self.numpy.itemsize


TABLE = (
    DType("bool", "BOOL", "TYPE_BOOL", np.dtype(np.bool_), "bool_contents"),
    DType("uint8", "UINT8", "TYPE_UINT8", np.dtype("<u1"), "uint_contents"),
    DType("uint16", "UINT16", "TYPE_UINT16", np.dtype("<u2"), "uint_contents"),
    DType("uint32", "UINT32", "TYPE_UINT32", np.dtype("<u4"), "uint_contents"),
    DType("uint64", "UINT64", "TYPE_UINT64", np.dtype("<u8"), "uint64_contents"),
    DType("int8", "INT8", "TYPE_INT8", np.dtype("<i1"), "int_contents"),
    DType("int16", "INT16", "TYPE_INT16", np.dtype("<i2"), "int_contents"),
    DType("int32", "INT32", "TYPE_INT32", np.dtype("<i4"), "int_contents"),
    DType("int64", "INT64", "TYPE_INT64", np.dtype("<i8"), "int64_contents"),
    DType("float16", "FP16", "TYPE_FP16", np.dtype("<f2"), None),
    DType("float32", "FP32", "TYPE_FP32", np.dtype("<f4"), "fp32_contents"),
    DType("float64", "FP64", "TYPE_FP64", np.dtype("<f8"), "fp64_contents"),
    DType("bytes", "BYTES", "TYPE_STRING", np.dtype(object), "bytes_contents"),
)
BY_WIRE = {d.wire: d for d in TABLE}
BY_KSERVE = {d.kserve: d for d in TABLE}
BY_CONFIG = {d.config: d for d in TABLE}
_BY_NUMPY = {d.numpy.newbyteorder("="): d for d in TABLE if d.wire != "bytes"}
_LENGTH = struct.Struct("<I")
MAX_SPAN = 1 << 40   # NumPy refuses a shape whose nonzero dims multiply past what it can index


def element_count(shape) -> int | None:
    """How many elements `shape` holds, or None when no array can have it: a negative dim,
    or nonzero dims whose product is past MAX_SPAN (even when another dim is 0)."""
    count = span = 1
    for d in shape:
        if d < 0:
            return None
        count *= d
        span *= max(d, 1)
    return count if span <= MAX_SPAN else None


def declared_dims(shape) -> list:
    """An ONNX TensorShapeProto's dims as rtd states them: an int for a fixed size (0 is a
    real, exact size), the name of a symbolic dim, None for an unknown one: a dim with neither
    value nor name, or the negative value (-1) older exporters write for a dynamic dim."""
    return [d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else (d.dim_param or None) for d in shape.dim]


def of_numpy(dtype) -> DType | None:
    """The row for a NumPy dtype (either byte order; object and str/bytes arrays are BYTES)."""
    row = _BY_NUMPY.get(dtype) if isinstance(dtype, np.dtype) else None   # the usual: asked for every tensor that crosses
    if row is not None:
        return row
    dtype = np.dtype(dtype)
    if dtype.kind in "OSU":
        return BY_WIRE["bytes"]
    return _BY_NUMPY.get(dtype.newbyteorder("="))


def kserve_name(wire_name: str | None) -> str:
    """KServe datatype of a wire name, "" when it has none (an unknown or absent type)."""
    row = BY_WIRE.get(wire_name or "")
    return row.kserve if row else ""


def encode_bytes(a: np.ndarray) -> bytes:
    """A BYTES tensor in Triton's binary form (str elements as UTF-8)."""
    parts = []
    for item in a.reshape(-1):
        b = item if isinstance(item, bytes) else str(item).encode()
        parts += [_LENGTH.pack(len(b)), b]
    return b"".join(parts)


def decode_bytes(raw, count: int) -> np.ndarray | str:
    """`count` BYTES elements from Triton's binary form, as a flat object array; a one-line
    reason (str) when the bytes are not exactly that many well-formed elements."""
    view = memoryview(raw)
    if count * _LENGTH.size > len(view):   # before allocating: each element takes at least its length
        return f"{count} BYTES elements cannot fit in {len(view)} bytes"
    out, pos = np.empty(count, dtype=object), 0
    for i in range(count):
        if pos + 4 > len(view):
            return f"BYTES element {i} truncated"
        (n,) = _LENGTH.unpack_from(view, pos)
        if pos + 4 + n > len(view):
            return f"BYTES element {i} longer than the data"
        out[i] = bytes(view[pos + 4: pos + 4 + n])
        pos += 4 + n
    if pos != len(view):
        return f"{len(view) - pos} bytes after the last BYTES element"
    return out
