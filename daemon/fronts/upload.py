"""A load request read from its spool file without holding it: where each package file lies.

An upload is spooled to an unlinked file of the state directory as it arrives (transport), so
the supervisor never holds a package in memory; this module finds the files in it with
bounded work and memory whatever their size, and hands them on as Extents that seal
themselves into memfds (loader.intake), read by the kernel or in 1 MiB chunks:

- gRPC `RepositoryModelLoadRequest` (rtd/proto/grpc_service.proto: repository_name 1,
  model_name 2, parameters 3, a map of ModelRepositoryParameter: bool 1, int64 2, string 3,
  bytes 4) is walked field by field as rtd.infer_request walks an inference request, through
  a small window of the file: only tags, lengths and short texts are read; each `file:` bytes
  parameter is recorded as its offset and length (FileExtent, copied by copy_file_range).
- REST's JSON `{"parameters": {"config": "...", "file:<path>": "<base64>", ...}}` is scanned
  forward once, 1 MiB at a time, by a lexer of exactly that shape (no other key, no nesting,
  string values only): keys and `config` are short and decoded by json; each file's base64
  is checked against its alphabet as it passes and recorded as its place (Base64Extent,
  decoded in chunks straight into its memfd).

Both are the same bounded walk over untrusted bytes the supervisor already makes of every
inference request's header; nothing here builds a value proportional to the payload. The
extents share one duplicate of the spool's fd, closed when the intake is done with them
(`Upload.close`), whatever became of the call meanwhile.
"""
import binascii
import json
import os
import re

from rtd.errors import Code, RtdError
from rtd.infer_request import LENGTH, VARINT, FieldReader
from rtd.loader.sealed import FileExtent, SealedFile, SealedWriter
from rtd.proto import FILE_PREFIX

MAX_FIELDS = 1 << 12       # fields of one load request, all levels together
MAX_PARAMETERS = 256
MAX_KEY = 1 << 12          # bytes of one parameter name
MAX_CONFIG = 1 << 20       # bytes of the `config` parameter
WINDOW = 1 << 16           # what the protobuf walk reads at once
CHUNK = 1 << 20            # what the JSON scan and the base64 decoding read at once
_BASE64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="
_STRING_END = re.compile(rb'["\\]')


def _bad(detail: str) -> RtdError:
    return RtdError(Code.E_REQUEST_INVALID, detail)


class Upload(dict):
    """{package path: Extent} of one load request, the `config` it carried, and the package_bytes
    charge of its spool (the package's bytes are taken from it, loads charge nothing twice)."""

    def __init__(self, spool):
        super().__init__()
        self.fd, self.size, self.charge, self.config = os.dup(spool.fd), len(spool), spool.charge, None

    def add(self, key: str, extent) -> None:
        if not key.startswith(FILE_PREFIX):
            raise _bad(f"load parameter {key[:100]!r} is not offered (signed packages only)")
        if len(self) >= MAX_PARAMETERS:
            raise _bad(f"more than {MAX_PARAMETERS} load parameters")
        self[key[len(FILE_PREFIX):]] = extent

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _read_upload(spool, scan) -> Upload:
    upload = Upload(spool)
    try:
        scan(upload)
    except BaseException:
        upload.close()
        raise
    return upload


# -- gRPC ------------------------------------------------------------------------------------------
class _Window:
    """A spool file as FieldReader reads it: by position (one byte) and slice, through a small window."""

    def __init__(self, fd: int, size: int):
        self.fd, self.size, self.start, self.data = fd, size, 0, b""

    def __getitem__(self, key):
        if isinstance(key, slice):
            return os.pread(self.fd, key.stop - key.start, key.start)
        if not self.start <= key < self.start + len(self.data):
            self.start, self.data = key, os.pread(self.fd, WINDOW, key)
        return self.data[key - self.start]


def read_grpc_load(spool) -> tuple[str, Upload]:
    """(model name, its files and config) of a spooled RepositoryModelLoadRequest."""
    name = []

    def scan(upload: Upload) -> None:
        r = FieldReader(_Window(upload.fd, upload.size), [MAX_FIELDS])
        for number, wire, span in r.fields(0, upload.size):
            if number in (1, 2):
                if wire != LENGTH:
                    raise _bad("repository_name or model_name has the wrong wire type")
                text = r.text(span, ("repository_name", "model_name")[number - 1])
                if number == 2:
                    name[:] = [text]
            elif number == 3:
                if wire != LENGTH:
                    raise _bad("parameters has the wrong wire type")
                _grpc_parameter(r, span, upload)
    upload = _read_upload(spool, scan)
    return (name[0] if name else ""), upload


def _grpc_parameter(r: FieldReader, span, upload: Upload) -> None:
    key, value = "", None
    for number, wire, v in r.fields(*span):
        if number == 1 and wire == LENGTH:
            key = r.text(v, "a load parameter's name")
        elif number == 2 and wire == LENGTH:
            value = v
        else:
            raise _bad("a load parameter is malformed")
    kind, found = None, None
    for number, wire, v in r.fields(*value) if value else ():
        kind, found = (number, wire), v
    if key == "config" and kind == (3, LENGTH):
        if found[1] - found[0] > MAX_CONFIG:
            raise _bad(f"the config parameter is longer than {MAX_CONFIG} bytes")
        try:
            upload.config = bytes(r.buf[found[0]:found[1]]).decode("utf-8")
        except UnicodeDecodeError:
            raise _bad("the config parameter is not UTF-8") from None
    elif kind == (4, LENGTH):
        upload.add(key, FileExtent(upload.fd, found[0], found[1] - found[0]))
    elif kind is None or kind[1] == VARINT or kind[0] == 3:
        raise _bad(f"load parameter {key[:100]!r} is not offered (signed packages only)")
    else:
        raise _bad("a load parameter is malformed")


# -- REST ------------------------------------------------------------------------------------------
class Base64Extent:
    """A package file as base64 text at [start, end) of the spool (`\\/` its only escape): decoded
    1 MiB at a time into its memfd."""

    def __init__(self, fd: int, start: int, end: int, size: int):
        self.fd, self.start, self.end, self.size = fd, start, end, size

    def __len__(self) -> int:
        return self.size

    def seal(self, name: str, cap: int, code: Code) -> SealedFile:
        writer = SealedWriter(name, min(cap, self.size), code)
        try:
            carry, pos = b"", self.start
            while pos < self.end:
                chunk = os.pread(self.fd, min(CHUNK, self.end - pos), pos)
                if not chunk:
                    raise _bad(f"{name}: the upload ended early")
                pos += len(chunk)
                text = carry + chunk.replace(b"\\", b"")   # `\/` is the only escape a file's text holds
                whole = len(text) - len(text) % 4
                carry = text[whole:]
                writer.write(binascii.a2b_base64(text[:whole], strict_mode=True))
            if carry or writer.size != self.size:
                raise _bad(f"{name}: not base64")
            return writer.seal()
        except binascii.Error:
            writer.discard()
            raise _bad(f"{name}: not base64") from None
        except BaseException:
            writer.discard()
            raise


class _Scanner:
    """The JSON of a REST load request, read forward from its spool, CHUNK bytes at a time."""

    def __init__(self, fd: int, size: int):
        self.fd, self.size, self.base, self.data, self.i = fd, size, 0, b"", 0

    def _fill(self) -> bool:
        if self.i < len(self.data):
            return True
        self.base += len(self.data)
        self.data, self.i = (os.pread(self.fd, min(CHUNK, self.size - self.base), self.base)
                             if self.base < self.size else b""), 0
        return bool(self.data)

    def pos(self) -> int:
        return self.base + self.i

    def peek(self) -> int:
        """The next byte past whitespace, not consumed (-1 at the end)."""
        while self._fill():
            byte = self.data[self.i]
            if byte not in b" \t\r\n":
                return byte
            self.i += 1
        return -1

    def take(self, allowed: bytes) -> int:
        byte = self.peek()
        if byte < 0 or byte not in allowed:
            raise _bad(f"the request is not the JSON of a load request (at byte {self.pos()}: expected "
                       f"{' or '.join(repr(chr(b)) for b in allowed)})")
        self.i += 1
        return byte

    def string(self, on_segment=None) -> tuple[int, int]:
        """A JSON string from its opening quote: (start, end) of its raw text in the spool.
        `on_segment(bytes)` sees each run of text between escapes; escapes go to it as b"\\\\" + the
        escaped byte (a file's text allows only `\\/`)."""
        self.take(b'"')
        start = self.pos()
        while self._fill():
            match = _STRING_END.search(self.data, self.i)
            stop = match.start() if match else len(self.data)
            if on_segment is not None and stop > self.i:
                on_segment(self.data[self.i:stop])
            self.i = stop
            if match is None:
                continue
            if self.data[stop] == ord('"'):
                self.i += 1
                return start, self.pos() - 1
            self.i += 1
            if not self._fill():
                break
            if on_segment is not None:
                on_segment(b"\\" + self.data[self.i:self.i + 1])
            self.i += 1
        raise _bad("the request ends inside a string")

    def short(self, start: int, end: int, limit: int, what: str) -> str:
        if end - start > limit:
            raise _bad(f"{what} is longer than {limit} bytes")
        try:
            value = json.loads(b'"' + os.pread(self.fd, end - start, start) + b'"')
        except ValueError:
            raise _bad(f"{what} is not a JSON string") from None
        return value


class _Base64Text:
    """Counts a file's base64 text as the scanner passes it, refusing anything else."""

    def __init__(self, key: str):
        self.key, self.chars, self.tail = key, 0, b""

    def __call__(self, segment: bytes) -> None:
        if segment == b"\\/":
            segment = b"/"
        if segment.translate(None, _BASE64):
            raise _bad(f"load parameter {self.key[:100]!r}: not base64")
        self.chars += len(segment)
        self.tail = (self.tail + segment)[-2:]

    def size(self) -> int:
        if self.chars % 4:
            raise _bad(f"load parameter {self.key[:100]!r}: not base64")
        return self.chars // 4 * 3 - self.tail.count(b"=")


def read_rest_load(spool) -> Upload:
    """The files and config of a spooled REST load request (an empty body: none)."""
    def scan(upload: Upload) -> None:
        s = _Scanner(upload.fd, upload.size)
        if s.peek() < 0:
            return
        s.take(b"{")
        if s.peek() != ord("}"):
            key = s.short(*s.string(), MAX_KEY, "a key")
            if key != "parameters":
                raise _bad("a load request holds `parameters` only")
            s.take(b":")
            _rest_parameters(s, upload)
        s.take(b"}")
        if s.peek() >= 0:
            raise _bad("the request holds more than one JSON value")
    return _read_upload(spool, scan)


def _rest_parameters(s: _Scanner, upload: Upload) -> None:
    s.take(b"{")
    if s.peek() == ord("}"):
        s.take(b"}")
        return
    while True:
        key = s.short(*s.string(), MAX_KEY, "a load parameter's name")
        s.take(b":")
        if s.peek() != ord('"'):
            raise _bad(f"load parameter {key[:100]!r} is not offered (signed packages only)")
        if key == "config":
            upload.config = s.short(*s.string(), MAX_CONFIG, "the config parameter")
        elif key.startswith(FILE_PREFIX):   # tritonclient sends the files base64
            text = _Base64Text(key)
            start, end = s.string(text)
            upload.add(key, Base64Extent(upload.fd, start, end, text.size()))
        else:
            raise _bad(f"load parameter {key[:100]!r} is not offered (signed packages only)")
        if s.take(b",}") == ord("}"):
            return
