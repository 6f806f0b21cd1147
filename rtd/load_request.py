"""A KServe v2 `RepositoryModelLoadRequest` read from its wire form where it lies (a spool file),
without reading the files it carries: the model name, the `config` parameter and where each
`file:<path>` parameter's bytes lie.

Walked field by field by the one protobuf walker (rtd/protowire.py), as an inference request's
header is, but through a small window of the file read with pread rather than a mapping of it:
only tags, lengths and short texts are read, every field visited once, at most MAX_FIELDS of
them; anything malformed is E_REQUEST_INVALID. Field numbers are those of
rtd/proto/grpc_service.proto (Triton's): the request's repository_name 1, model_name 2,
parameters 3 (map<string, ModelRepositoryParameter>); ModelRepositoryParameter's bool_param 1,
int64_param 2, string_param 3, bytes_param 4.
"""
import dataclasses
import os

from rtd.errors import Code, RtdError
from rtd.proto import FILE_PREFIX
from rtd.protowire import LENGTH, VARINT, Walker

MAX_FIELDS = 1 << 12       # fields of one load request, all levels together
MAX_PARAMETERS = 256
MAX_CONFIG = 1 << 20       # bytes of the `config` parameter
MAX_TEXT = 1 << 16         # bytes of a name
WINDOW = 1 << 16           # what the walk reads at once


def _bad(detail: str) -> RtdError:
    return RtdError(Code.E_REQUEST_INVALID, detail)


@dataclasses.dataclass
class LoadHead:
    model_name: str = ""
    config: str | None = None
    files: dict = dataclasses.field(default_factory=dict)   # package path -> (offset, length) in the file


class _Window:
    """A file as the walker reads it: by position (one byte) and slice, through a small window."""

    def __init__(self, fd: int):
        self.fd, self.start, self.data = fd, 0, b""

    def __getitem__(self, key):
        if isinstance(key, slice):
            return os.pread(self.fd, key.stop - key.start, key.start)
        if not self.start <= key < self.start + len(self.data):
            self.start, self.data = key, os.pread(self.fd, WINDOW, key)
        return self.data[key - self.start]


class _FileWalker(Walker):
    """rtd.protowire's walker over a file's window instead of a buffer (nothing of it is mapped)."""

    def __init__(self, fd: int):
        self.buf, self.code, self.budget = _Window(fd), Code.E_REQUEST_INVALID, MAX_FIELDS


def scan(fd: int, size: int) -> LoadHead:
    """The head of the RepositoryModelLoadRequest that fills the first `size` bytes of `fd`."""
    r, head = _FileWalker(fd), LoadHead()
    for number, wire, span in r.fields(0, size):
        if number in (1, 2):
            r.expect(wire, LENGTH, "repository_name or model_name")
            text = r.text(span, ("repository_name", "model_name")[number - 1], MAX_TEXT)
            if number == 2:
                head.model_name = text
        elif number == 3:
            r.expect(wire, LENGTH, "parameters")
            _parameter(r, span, head)
    return head


def _parameter(r: Walker, span, head: LoadHead) -> None:
    key, value = "", None
    for number, wire, v in r.fields(*span):
        if number == 1 and wire == LENGTH:
            key = r.text(v, "a load parameter's name", MAX_TEXT)
        elif number == 2 and wire == LENGTH:
            value = v
        else:
            raise _bad("a load parameter is malformed")
    kind, found = None, None
    for number, wire, v in r.fields(*value) if value else ():
        kind, found = (number, wire), v
    if key == "config" and kind == (3, LENGTH):
        head.config = r.text(found, "the config parameter", MAX_CONFIG)
    elif key.startswith(FILE_PREFIX) and kind == (4, LENGTH):
        if len(head.files) >= MAX_PARAMETERS:
            raise _bad(f"more than {MAX_PARAMETERS} load parameters")
        head.files[key[len(FILE_PREFIX):]] = (found[0], found[1] - found[0])
    elif kind is None or kind[1] == VARINT or kind[0] in (3, 4):
        raise _bad(f"load parameter {key[:100]!r} is not offered (signed packages only)")
    else:
        raise _bad("a load parameter is malformed")
