"""A KServe v2 `RepositoryModelLoadRequest` read from its wire form where it lies (a spool file),
without reading the files it carries: the model name, the `config` parameter and where each
`file:<path>` parameter's bytes lie.

Walked field by field as rtd.infer_request walks an inference request, through a small window
of the file: only tags, lengths and short texts are read, every field visited once, at most
MAX_FIELDS of them; anything malformed is E_REQUEST_INVALID. Field numbers are those of
rtd/proto/grpc_service.proto (Triton's): the request's repository_name 1, model_name 2,
parameters 3 (map<string, ModelRepositoryParameter>); ModelRepositoryParameter's bool_param 1,
int64_param 2, string_param 3, bytes_param 4.
"""
import dataclasses
import os

from rtd.errors import Code, RtdError
from rtd.infer_request import LENGTH, VARINT, FieldReader
from rtd.proto import FILE_PREFIX

MAX_FIELDS = 1 << 12       # fields of one load request, all levels together
MAX_PARAMETERS = 256
MAX_CONFIG = 1 << 20       # bytes of the `config` parameter
WINDOW = 1 << 16           # what the walk reads at once


def _bad(detail: str) -> RtdError:
    return RtdError(Code.E_REQUEST_INVALID, detail)


@dataclasses.dataclass
class LoadHead:
    model_name: str = ""
    config: str | None = None
    files: dict = dataclasses.field(default_factory=dict)   # package path -> (offset, length) in the file


class _Window:
    """A file as FieldReader reads it: by position (one byte) and slice, through a small window."""

    def __init__(self, fd: int):
        self.fd, self.start, self.data = fd, 0, b""

    def __getitem__(self, key):
        if isinstance(key, slice):
            return os.pread(self.fd, key.stop - key.start, key.start)
        if not self.start <= key < self.start + len(self.data):
            self.start, self.data = key, os.pread(self.fd, WINDOW, key)
        return self.data[key - self.start]


def scan(fd: int, size: int) -> LoadHead:
    """The head of the RepositoryModelLoadRequest that fills the first `size` bytes of `fd`."""
    r, head = FieldReader(_Window(fd), [MAX_FIELDS]), LoadHead()
    for number, wire, span in r.fields(0, size):
        if number in (1, 2):
            if wire != LENGTH:
                raise _bad("repository_name or model_name has the wrong wire type")
            text = r.text(span, ("repository_name", "model_name")[number - 1])
            if number == 2:
                head.model_name = text
        elif number == 3:
            if wire != LENGTH:
                raise _bad("parameters has the wrong wire type")
            _parameter(r, span, head)
    return head


def _parameter(r: FieldReader, span, head: LoadHead) -> None:
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
            head.config = bytes(r.buf[found[0]:found[1]]).decode("utf-8")
        except UnicodeDecodeError:
            raise _bad("the config parameter is not UTF-8") from None
    elif key.startswith(FILE_PREFIX) and kind == (4, LENGTH):
        if len(head.files) >= MAX_PARAMETERS:
            raise _bad(f"more than {MAX_PARAMETERS} load parameters")
        head.files[key[len(FILE_PREFIX):]] = (found[0], found[1] - found[0])
    elif kind is None or kind[1] == VARINT or kind[0] in (3, 4):
        raise _bad(f"load parameter {key[:100]!r} is not offered (signed packages only)")
    else:
        raise _bad("a load parameter is malformed")
