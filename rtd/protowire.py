"""The protobuf wire format read without a parser: the fields of one message as (number, wire
type, value) — a varint's value, or the (start, end) of a length-delimited or fixed-width
field — with every length checked against its message, the walk bounded by a budget of
fields, groups refused, and anything malformed refused with the reader's own error code.

For the bounded reads that must not build objects from what they read: a request's header in
the supervisor and the worker (rtd/infer_request.py), an upload's files, and the ONNX guard's
structural pre-scan (loader/onnx_wire.py).
"""
from rtd.errors import Code, RtdError

VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5
_FIXED = {FIXED64: 8, FIXED32: 4}


def encode_varint(n: int) -> bytes:
    """A non-negative integer as a varint (for the few writers: a response's framing, a model without its weights)."""
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


class Walker:
    """Reads `buf` (any bytes-like); `code` names what malformed data is (E_REQUEST_INVALID,
    E_ONNX_PARSE, ...); at most `max_fields` fields are visited in all (None: no bound)."""

    def __init__(self, buf, code: Code, max_fields: int | None = None):
        flat = isinstance(buf, (bytes, bytearray)) or (isinstance(buf, memoryview) and buf.format == "B" and buf.ndim == 1)
        # the caller's own buffer where it can be indexed by byte: a view of ours would pin its mapping
        self.buf = buf if flat else memoryview(buf).cast("B")
        self.code, self.budget = code, max_fields

    def error(self, detail: str) -> RtdError:
        return RtdError(self.code, detail)

    def varint(self, pos: int, end: int) -> tuple[int, int]:
        buf, result, shift = self.buf, 0, 0
        while True:
            if pos >= end or shift > 63:
                raise self.error(f"a varint at byte {pos} is truncated or too long")
            byte = buf[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                return result, pos
            shift += 7

    def fields(self, start: int, end: int):
        """(field number, wire type, value) of each field of the message in buf[start:end]."""
        buf, pos = self.buf, start
        while pos < end:
            # Most fields of a request are a one-byte key and a one-byte varint or length:
            # read those here, everything else (and every error) through field().
            key, wire = buf[pos], buf[pos] & 7
            if 8 <= key < 0x80 and pos + 1 < end and (value := buf[pos + 1]) < 0x80 and (self.budget is None or self.budget > 0) \
                    and (wire == VARINT or wire == LENGTH and value <= end - pos - 2):
                if wire == VARINT:
                    pos += 2
                else:
                    value, pos = (pos + 2, pos + 2 + value), pos + 2 + value
                if self.budget is not None:
                    self.budget -= 1
                yield key >> 3, wire, value
                continue
            number, wire, value, pos = self.field(pos, end)
            yield number, wire, value

    def field(self, pos: int, end: int) -> tuple[int, int, object, int]:
        """The field whose key is at buf[pos] (a message ending at `end`) and the position after it."""
        if self.budget is not None:
            self.budget -= 1
            if self.budget < 0:
                raise self.error("more fields than allowed")
        key, after = self.varint(pos, end)
        if after - pos > 5 or key > 0xFFFFFFFF:   # a key is a 32-bit varint: protobuf refuses a longer one
            raise self.error(f"a field key at byte {pos} is longer than 32 bits")
        number, wire, pos = key >> 3, key & 7, after
        if number == 0:
            raise self.error(f"field number 0 at byte {pos}")
        if wire == VARINT:
            value, pos = self.varint(pos, end)
        elif wire == LENGTH:
            length, pos = self.varint(pos, end)
            if length > end - pos:
                raise self.error(f"field {number} runs past its message")
            value, pos = (pos, pos + length), pos + length
        elif wire in _FIXED:
            if _FIXED[wire] > end - pos:
                raise self.error(f"field {number} is truncated")
            value, pos = (pos, pos + _FIXED[wire]), pos + _FIXED[wire]
        else:
            raise self.error(f"wire type {wire} (groups) at byte {pos}")
        return number, wire, value, pos

    def text(self, span: tuple[int, int], what: str, max_bytes: int) -> str:
        """A string field's UTF-8 text, at most `max_bytes` long."""
        start, end = span
        if end - start > max_bytes:
            raise self.error(f"{what} is longer than {max_bytes} bytes")
        try:
            return bytes(self.buf[start:end]).decode("utf-8")
        except UnicodeDecodeError:
            raise self.error(f"{what} is not UTF-8") from None

    def expect(self, wire: int, want: int, what: str) -> None:
        if wire != want:
            raise self.error(f"{what} has the wrong wire type")
