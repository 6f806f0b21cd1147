"""The upload decoder: runs INSIDE the sandbox, in the uploading tenant's cgroups, and turns one
spooled REST load request into its package files.

A REST load is JSON, `{"parameters": {"config": "...", "file:<path>": "<base64>", ...}}`, as
tritonclient.http sends it. Reading it is work proportional to the upload, on bytes the tenant
wrote, so the supervisor does none of it: it hands this process the spool file (read-only) in a
DECODE frame, with the caps the files must keep, and gets back one memfd per file with its path
and size (an OK frame) or a refusal (ERROR {code, detail}); it then seals each memfd, checks its
size and hashes it itself. Like the model worker, this process is preloaded into the zygote,
never opens a path and exits after its one answer.

The JSON is scanned forward once, 1 MiB at a time, by a lexer of exactly that shape (no other
key, no nesting, string values only): names and `config` are short and decoded by json; each
file's base64 (`\\/` its only escape) is decoded in 64 KiB steps straight into its memfd. Memory
stays bounded whatever the size of the upload.
"""
import binascii
import json
import os
import socket

from rtd import wire
from rtd.errors import Code, RtdError
from rtd.proto import FILE_PREFIX

MAX_KEY = 1 << 12          # bytes of one parameter name
MAX_CONFIG = 1 << 20       # bytes of the `config` parameter
CHUNK = 1 << 20            # what the scan reads at once
DECODE_STEP = 1 << 16      # base64 text decoded at once
ENTRY = "rtd.daemon.worker.upload:decode"


def _bad(detail: str) -> RtdError:
    return RtdError(Code.E_REQUEST_INVALID, detail)


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
            raise _bad(f"the request is not the JSON of a load request (at byte {self.base + self.i}: expected "
                       f"{' or '.join(repr(chr(b)) for b in allowed)})")
        self.i += 1
        return byte

    def string(self, on_text=None, limit: int | None = None) -> bytes | None:
        """A JSON string from its opening quote. Its raw text goes to `on_text(bytes)` run by run,
        each escape as b"\\\\" + the escaped byte; or, with `limit`, it is returned raw (at most limit bytes)."""
        self.take(b'"')
        kept = []
        while self._fill():
            quote, backslash = self.data.find(b'"', self.i), self.data.find(b"\\", self.i)
            stop = min(p for p in (quote, backslash, len(self.data)) if p >= 0)
            run = self.data[self.i:stop]
            if limit is not None:
                kept.append(run)
                if sum(map(len, kept)) > limit:
                    raise _bad(f"a string is longer than {limit} bytes")
            elif run:
                on_text(run)
            self.i = stop
            if stop == len(self.data):
                continue
            self.i += 1
            if stop == quote:
                return b"".join(kept) if limit is not None else None
            if not self._fill():
                break
            escape = b"\\" + self.data[self.i:self.i + 1]
            self.i += 1
            if limit is not None:
                kept.append(escape)
            else:
                on_text(escape)
        raise _bad("the request ends inside a string")

    def short(self, limit: int, what: str) -> str:
        raw = self.string(limit=limit)
        try:
            return json.loads(b'"' + raw + b'"')
        except ValueError:
            raise _bad(f"{what} is not a JSON string") from None


class _File:
    """One file's base64 text decoded into a new memfd as the scanner passes it."""

    def __init__(self, path: str, cap: int):
        self.path, self.cap, self.size, self.pending = path, cap, 0, b""
        self.fd = os.memfd_create("rtd:upload:" + path[-200:], os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)

    def __call__(self, text: bytes) -> None:
        if text.startswith(b"\\"):
            if text != b"\\/":
                raise _bad(f"file {self.path!r}: not base64")
            text = b"/"
        data = self.pending + text
        whole = len(data) - len(data) % 4
        view = memoryview(data)
        for start in range(0, whole, DECODE_STEP):
            self._write(view[start:min(start + DECODE_STEP, whole)])
        self.pending = bytes(view[whole:])

    def _write(self, text: bytes) -> None:
        try:
            data = binascii.a2b_base64(text, strict_mode=True)
        except binascii.Error:
            raise _bad(f"file {self.path!r}: not base64") from None
        self.size += len(data)
        if self.size > self.cap:
            raise RtdError(Code.E_ONNX_LIMIT, f"{self.path} is over the {self.cap}-byte cap")
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]

    def finish(self) -> None:
        if self.pending:
            self._write(self.pending)


def _parameters(s: _Scanner, caps: dict) -> tuple[list, str | None]:
    files, config, total = [], None, 0
    s.take(b"{")
    if s.peek() == ord("}"):
        s.take(b"}")
        return files, config
    try:
        while True:
            key = s.short(MAX_KEY, "a load parameter's name")
            s.take(b":")
            if s.peek() != ord('"'):
                raise _bad(f"load parameter {key[:100]!r} is not offered (signed packages only)")
            if key == "config":
                config = s.short(MAX_CONFIG, "the config parameter")
            elif key.startswith(FILE_PREFIX):   # tritonclient sends the files base64
                if len(files) >= caps["max_files"]:
                    raise RtdError(Code.E_ONNX_LIMIT, f"more than {caps['max_files']} files")
                files.append(_File(key[len(FILE_PREFIX):], min(caps["max_file_bytes"], caps["max_total_bytes"] - total)))
                s.string(files[-1])
                files[-1].finish()
                total += files[-1].size
            else:
                raise _bad(f"load parameter {key[:100]!r} is not offered (signed packages only)")
            if s.take(b",}") == ord("}"):
                return files, config
    except BaseException:
        for f in files:
            os.close(f.fd)
        raise


def read_load_request(fd: int, size: int, caps: dict) -> tuple[list, str | None]:
    """([_File, ...], config) of the spooled JSON; an empty body names none."""
    s = _Scanner(fd, size)
    files, config = [], None
    if s.peek() < 0:
        return files, config
    s.take(b"{")
    if s.peek() != ord("}"):
        if s.short(MAX_KEY, "a key") != "parameters":
            raise _bad("a load request holds `parameters` only")
        s.take(b":")
        files, config = _parameters(s, caps)
    try:
        s.take(b"}")
        if s.peek() >= 0:
            raise _bad("the request holds more than one JSON value")
    except BaseException:
        for f in files:
            os.close(f.fd)
        raise
    return files, config


def decode(sock, *args) -> None:
    """One DECODE frame in (head {size, max_files, max_file_bytes, max_total_bytes}, fds [the spool]),
    one answer out: OK {files: [[path, size], ...], config} with the memfds, or ERROR {code, detail}."""
    if not isinstance(sock, socket.socket):
        sock = socket.socket(fileno=sock)
    try:
        frame = wire.Reader(sock).recv()
    except EOFError:
        return
    files = []
    try:
        if frame.kind != wire.Kind.DECODE or len(frame.fds) != 1:
            raise RtdError(Code.E_WORKER_PROTOCOL, "expected one DECODE frame with the spool's fd")
        files, config = read_load_request(frame.fds[0], int(frame.head["size"]), frame.head)
        wire.send(sock, wire.Kind.OK, head={"files": [[f.path, f.size] for f in files], "config": config},
                  fds=[f.fd for f in files])
    except RtdError as e:
        wire.send(sock, wire.Kind.ERROR, head={"code": e.code.name, "detail": e.detail})
    except OSError as e:   # a memfd past RLIMIT_FSIZE, the spool unreadable
        wire.send(sock, wire.Kind.ERROR, head={"code": Code.E_IO.name, "detail": f"decoding the upload: {e.strerror}"})
    finally:
        for fd in frame.fds + [f.fd for f in files]:
            os.close(fd)
