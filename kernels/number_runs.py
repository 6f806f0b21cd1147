"""Long repeated-number attributes read from their protobuf encoding in a pass or a few over the bytes
(varints in C where the compiled kernels are, else by NumPy; float32 by NumPy) instead of one Python
number per element through the protobuf runtime (~250 ns each: seconds for a tree ensemble's millions
of node fields).

onnx.proto is proto2, so the runtime writes a repeated number unpacked: a run of [key, value] pairs,
one per element, after the fields numbered lower. `run` finds that run in an attribute's own
encoding and decodes it, or answers None when the elements lie any other way (packed, split by other
fields), for the caller to read them through the runtime.
"""
import numpy as np

from rtd import protowire
from rtd.errors import Code

from .native import compiled

_WIRE = {np.dtype(np.int64): protowire.VARINT, np.dtype(np.float32): protowire.FIXED32}


def run(message: bytes, number: int, count: int, dtype) -> np.ndarray | None:
    """The `count` elements of field `number` (int64 varints or float32) of the encoded message."""
    dtype = np.dtype(dtype)
    key = number << 3 | _WIRE[dtype]
    if key >= 0x80:
        return None   # a one-byte key keeps the varint walk below simple; AttributeProto's ints and floats have one
    walker = protowire.Walker(message, Code.E_ONNX_INVALID)
    pos = 0
    while pos < len(message) and message[pos] != key:
        found, _, _, pos = walker.field(pos, len(message))
        if found >= number:
            return None
    data = np.frombuffer(message, np.uint8)[pos:]
    if dtype == np.float32:
        return _fixed32(data, key, count)
    return _varints(data, key, count) if compiled is None else _compiled_varints(data, key, count)


def _compiled_varints(data: np.ndarray, key: int, count: int) -> np.ndarray | None:
    """The run decoded in one C pass (native/varint.c), the NumPy passes' result."""
    values = np.empty(count, np.int64)
    ffi = compiled.ffi
    taken = compiled.lib.rtd_varint_run(ffi.from_buffer("uint8_t[]", data), data.size, key, count,
                                        ffi.from_buffer("int64_t[]", values, require_writable=True), count)
    return values if taken > 0 else None


def _fixed32(data: np.ndarray, key: int, count: int) -> np.ndarray | None:
    if len(data) < 5 * count:
        return None
    pairs = data[:5 * count].reshape(count, 5)
    if (pairs[:, 0] != key).any():
        return None
    return np.ascontiguousarray(pairs[:, 1:]).view("<f4").reshape(count)


def _varints(data: np.ndarray, key: int, count: int) -> np.ndarray | None:
    # every varint ends at its first byte below 0x80; keys are one byte, so ends alternate key, value
    ends = np.flatnonzero(data < 0x80)[:2 * count]
    if len(ends) < 2 * count:
        return None
    keys, value_ends = ends[0::2], ends[1::2]
    if keys[0] != 0 or (keys[1:] != value_ends[:-1] + 1).any() or (data[keys] != key).any():
        return None
    lengths = value_ends - keys
    longest = int(lengths.max())
    if longest > 10:
        return None
    # from each varint's last byte back to its first, seven bits at a time (node ids and features are
    # one or two bytes: one or two passes over the values, where a byte-by-byte decode makes several)
    values = data[value_ends].astype(np.uint64)
    for back in range(1, longest):
        longer = lengths > back
        at = slice(None) if longer.all() else np.flatnonzero(longer)
        values[at] = (values[at] << np.uint64(7)) | (data[value_ends[at] - back] & 0x7F)
    return values.view(np.int64)
