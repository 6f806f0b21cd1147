"""What the transport and its users agree on: the limits a connection keeps, a call as a
handler sees it, a handler's reply, a route's kind, and the contract every connection of
the table keeps (`Connection`) whatever protocol it speaks.

The transport moves bytes: it authenticates a call from its headers (through the routes'
`authenticate`), charges its stream and declared body size to the caller before the body
is let in, hands the handler the body as bytes, and writes the reply's parts as they are.
It never looks inside a body.
"""
import dataclasses
import fcntl
import mmap
import os
import typing

import numpy as np

from rtd import wire
from rtd.errors import storage_error

WRITE_HIGH_WATER = 1 << 20        # a connection's write buffer past which its responses wait for the socket
MAX_HEADER_LIST = 1 << 14         # one call's headers (HTTP/2 header list, HTTP/1.1 head)
PUBLIC_MESSAGE_BYTES = 1 << 12    # what an unauthenticated call may send
CONTROL_MESSAGE_BYTES = 1 << 16   # what a control call (index, metadata, unload, status, ...) may send
BACKOFF_S, BACKOFF_MAX_S = 0.005, 0.16   # budget refusals in a row on one connection wait this, doubling


@dataclasses.dataclass(frozen=True)
class TransportLimits:
    max_message_bytes: int
    max_connections: int
    max_connections_per_peer: int
    max_streams_per_connection: int
    auth_timeout_s: float
    idle_timeout_s: float
    send_timeout_s: float


@dataclasses.dataclass
class Call:
    """One call as a handler sees it."""
    method: str                     # "/package.Service/Method", or REST's "VERB /path"
    metadata: list                  # [(key, value)] like grpc's invocation_metadata (lower-case keys)
    who: str | None                 # the payer the routes' authenticate() named; None for public calls
    deadline: float | None          # time.monotonic() seconds
    message: bytes = b""            # the body (gRPC: the one message, without its 5-byte prefix)
    peer: str = "?"                 # the connection's peer: uid:N (SO_PEERCRED) or ip:ADDRESS
    params: dict = dataclasses.field(default_factory=dict)   # REST: what the route's pattern named
    received: float = 0.0           # time.monotonic() when the body was complete


@dataclasses.dataclass
class Reply:
    """A handler's answer: the serialized message as bytes-like parts, plus what stays
    charged until the last byte has left the process. REST answers carry their HTTP status
    and, with binary tensors after a JSON part, the JSON part's length."""
    parts: list
    charges: list = dataclasses.field(default_factory=list)
    status: int = 200
    json_length: int | None = None
    code: object = None             # a refusal's rtd.errors.Code


@dataclasses.dataclass(frozen=True)
class Method:
    handler: object                 # async (Call) -> Reply
    public: bool = False            # answered without credentials (liveness, readiness)
    control: bool = False           # cheap calls that may use the budgets' reserve
    spool: object = None            # (who, length) -> (body, its charge): where the body goes as it arrives, when
                                    # not in a buffer of the transport's (a file, a memfd); the route charges it

    def body_limit(self, limits: TransportLimits) -> int:
        """The most a call of this route may send."""
        return PUBLIC_MESSAGE_BYTES if self.public else CONTROL_MESSAGE_BYTES if self.control else limits.max_message_bytes


class SpooledBody:
    """A call's body written to a file as it arrives — an unlinked file of the state directory
    for an upload, a memfd for a large inference request — so the supervisor never holds it in
    its own memory; the handler reads it by offset (`view`, pages mapped only as read) or
    passes the fd on (`as_tensor`, sealed first: then nobody can change or shrink it). The file goes when
    the call ends."""

    def __init__(self, fd: int, expected: int):
        self.fd, self.expected, self.size = fd, expected, 0

    @classmethod
    def memfd(cls, expected: int) -> "SpooledBody":
        fd = os.memfd_create("rtd-body", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        return cls(fd, expected)

    def write(self, data) -> None:
        """Append; a write the disk refuses is the call's E_STORAGE_FULL (or E_INTERNAL)."""
        view = memoryview(data).cast("B")
        try:
            while view:
                written = os.pwrite(self.fd, view, self.size)
                self.size += written
                view = view[written:]
        except OSError as e:
            raise storage_error(e.errno, "spooling the body") from None

    def wrote(self, length: int) -> None:
        """Bytes the transport appended to the file itself (h2session's sink)."""
        self.size += length

    def __len__(self) -> int:
        return self.size

    def view(self) -> memoryview:
        """The body, mapped read-only (pages are read on demand, not held)."""
        return memoryview(mmap.mmap(self.fd, self.size, prot=mmap.PROT_READ)) if self.size else memoryview(b"")

    def as_tensor(self) -> wire.FdTensor:
        """The (memfd) body as a frame's tensor, sealed first: nobody can change or shrink it."""
        fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, wire.TENSOR_SEALS)
        return wire.FdTensor(self.fd, self.size)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class BufferBody(bytearray):
    """A small body, in the transport's memory (charged as request bytes)."""

    fd = -1   # no file: the transport appends what arrives

    def write(self, data) -> None:
        self += data

    def view(self) -> memoryview:
        return memoryview(self)

    def as_tensor(self) -> np.ndarray:
        """The body as a frame's tensor (copied into the frame or the channel's arena)."""
        return np.frombuffer(self, np.uint8)

    def close(self) -> None:
        pass


class Connection(typing.Protocol):
    """What the connection table asks of every connection it holds."""
    peer: str                       # who it counts against (uid:N or ip:ADDRESS)
    authenticated: bool             # it has carried an authenticated call
    opened: float                   # time.monotonic() at accept
    transport: object               # its asyncio transport (None before it is made)

    def sweep(self, now: float) -> None: ...    # every second: reset stalled work, close idle
    def busy(self) -> bool: ...                 # calls in hand
    def goaway(self) -> None: ...               # no new calls; those in hand finish
    def close(self) -> None: ...                # now
