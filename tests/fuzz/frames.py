"""Hostile byte streams for rtd.wire, shared by the Reader and the WorkerChannel targets.

A stream is a list of pieces, each written with its own sendmsg calls over a real
AF_UNIX socketpair, with real fds (sealed and unsealed memfds, pipes, a write-only reopened
memfd, /dev/null) passed by SCM_RIGHTS with a piece's first (or a random) segment. A piece is
a frame made by wire.encode from random tensors (inline, or through a real Arena), a frame
whose head is written by hand from an honest layout with a field or two replaced by hostile
values, or raw bytes; then mutated: header fields replaced, bytes flipped, cut short.
"""
import array
import dataclasses
import fcntl
import json
import os
import resource
import socket

import numpy as np
from hypothesis import strategies as st

from rtd import dtypes, wire
from rtd.wire import HEADER, MAGIC, VERSION, Kind

from .harness import edit_bytes

FD_KINDS = ("arena", "arena_page", "unsealed", "empty", "pipe", "wronly", "devnull")
ARENA_BYTES = 1 << 16

BIG = [2**31, 2**32, 2**34, 2**34 + 1, 2**39, 2**40 - 1, 2**40, 2**62, 2**63 - 1, 2**63, 2**64, -1, -(2**63)]
ints = st.one_of(st.integers(-2, 300), st.sampled_from(BIG), st.integers())
junk = st.one_of(st.none(), st.booleans(), st.floats(allow_nan=False), st.text(max_size=6),
                 st.lists(st.integers(-1, 3), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(0, 3), max_size=2))
edge_dims = st.sampled_from([0, 1, 2, 3, 2**20, 2**31, 2**39, 2**40 - 1])
hostile_shapes = st.one_of(st.lists(ints, max_size=18), st.lists(edge_dims, max_size=4), st.lists(edge_dims, min_size=15, max_size=17), junk)
wire_dtypes = st.sampled_from(sorted(dtypes.BY_WIRE))
any_dtype = st.one_of(wire_dtypes, st.sampled_from(["object", "float128", "complex64", "<f4", "", "BYTES", "FP32", "str"]), junk)


HOSTILE = {   # what a head field may be replaced with
    "name": st.one_of(st.sampled_from(["x", "y"]), junk), "dtype": any_dtype, "shape": hostile_shapes,
    "offset": st.one_of(ints, junk), "at": st.one_of(ints, junk), "nbytes": st.one_of(ints, junk),
    "arena_fd": st.one_of(st.integers(-1, 4), ints, junk), "arena": st.one_of(st.lists(ints, max_size=3), junk),
    "tensors": st.one_of(junk, st.lists(junk, max_size=2)),
}


def memfd(size: int, seals: int = 0) -> int:
    fd = os.memfd_create("fuzz", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    if seals:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return fd


class ArenaCopy:
    """The bytes of a sender's real arena, to pass as a sealed memfd of the same size."""

    def __init__(self, data: bytes):
        self.data = data

    def __repr__(self) -> str:
        return f"ArenaCopy({len(self.data)} bytes)"


def make_fd(kind) -> int:
    """A new fd of one kind (or a sealed copy of an arena); the sender closes it once sent."""
    sealed = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL
    if isinstance(kind, ArenaCopy):
        fd = memfd(len(kind.data))
        os.pwrite(fd, kind.data, 0)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, sealed)
        return fd
    if kind == "arena":
        return memfd(ARENA_BYTES, sealed)
    if kind == "arena_page":
        return memfd(4096, sealed)
    if kind == "unsealed":
        return memfd(4096)
    if kind == "empty":
        return memfd(0, sealed)
    if kind == "pipe":
        r, w = os.pipe2(os.O_CLOEXEC)
        os.close(w)
        return r
    if kind == "wronly":
        fd = memfd(4096, sealed)
        try:
            return os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_CLOEXEC)
        finally:
            os.close(fd)
    return os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)


@dataclasses.dataclass
class Segment:
    data: bytes
    fds: tuple = ()        # fd kinds passed with this segment's first byte


@dataclasses.dataclass
class Stream:
    segments: list
    eof: bool              # the writer closes (blocking reads to EOF) or stays (non-blocking reads)


# -- tensors and encoded frames -----------------------------------------------------------------
@st.composite
def arrays(draw, max_elements: int = 24):
    row = dtypes.BY_WIRE[draw(wire_dtypes)]
    shape = draw(st.lists(st.integers(0, 4), max_size=3))
    count = int(np.prod(shape)) if shape else 1
    if count > max_elements:
        shape, count = [max_elements], max_elements
    if row.wire == "bytes":
        items = draw(st.lists(st.binary(max_size=8), min_size=count, max_size=count))
        a = np.empty(count, dtype=object)
        a[:] = items
        return a.reshape(shape)
    raw = draw(st.binary(min_size=count * row.itemsize, max_size=count * row.itemsize))
    return np.frombuffer(raw, dtype=row.numpy).reshape(shape)


frame_kinds = st.one_of(st.sampled_from([Kind.OK, Kind.ERROR]), st.sampled_from(list(Kind)))
request_ids = st.one_of(st.integers(0, 4), st.integers(0, 2**64 - 1))
names = st.sampled_from(["x", "y", "z", "out", "ü"])
small_heads = st.dictionaries(st.sampled_from(["key", "code", "detail", "outputs", "released", "ok"]),
                              st.one_of(st.sampled_from(["E_INTERNAL", "E_INPUT_INVALID", "E_NOPE"]), st.text(max_size=8),
                                        st.integers(), st.lists(st.integers(0, 3), max_size=3), junk), max_size=3)


@st.composite
def encoded(draw, arena: wire.Arena):
    """Bytes and fd kinds of one frame from wire.encode (big tensors through `arena`)."""
    tensors = draw(st.dictionaries(names, arrays(), max_size=3))
    if draw(st.booleans()):
        tensors["big"] = np.full(wire.INLINE_LIMIT // 8 + draw(st.integers(0, 8)), draw(st.floats(allow_nan=False)))
    kinds = draw(st.lists(st.sampled_from(FD_KINDS), max_size=2))
    placeholders = list(range(len(kinds)))   # encode only counts them; send() passes fds of these kinds
    out = wire.encode(draw(frame_kinds), draw(request_ids), draw(small_heads), tensors, placeholders, arena)
    data = b"".join(bytes(memoryview(p).cast("B")) if memoryview(p).nbytes else b"" for p in out.parts)
    # a newly announced arena travels last in out.fds: passed as a sealed copy of the real one
    return data, tuple(kinds) + ((ArenaCopy(bytes(arena.map)),) if len(out.fds) > len(kinds) else ())


# -- hand-written heads ---------------------------------------------------------------------------
@st.composite
def honest_tensor(draw, name: str, body_len: int, arena_len: int):
    """A well-formed tensor entry and the body bytes it needs."""
    dtype = draw(wire_dtypes)
    row = dtypes.BY_WIRE[dtype]
    shape = draw(st.lists(st.integers(0, 4), max_size=3))
    count = int(np.prod(shape)) if shape else 1
    entry = {"name": name, "dtype": dtype, "shape": shape}
    if row.wire == "bytes":
        items = draw(st.lists(st.binary(max_size=6), min_size=count, max_size=count))
        data = b"".join(len(i).to_bytes(4, "little") + i for i in items)
        entry["nbytes"] = len(data)
    else:
        data = draw(st.binary(min_size=count * row.itemsize, max_size=count * row.itemsize))
    if arena_len and draw(st.booleans()):
        entry["at"] = draw(st.integers(0, max(arena_len - len(data), 0)))
        return entry, b""
    entry["offset"] = body_len
    return entry, data


@st.composite
def crafted(draw):
    """Bytes and fd kinds of a frame whose head is honest but for a field or two."""
    kinds = list(draw(st.lists(st.sampled_from(FD_KINDS), max_size=3)))
    head = dict(draw(small_heads))
    arena_len = 0
    if draw(st.booleans()):
        index = draw(st.integers(0, len(kinds)))
        kinds.insert(index, draw(st.sampled_from(["arena", "arena", "arena_page", *FD_KINDS])))
        head["arena_fd"] = index
        arena_len = {"arena": ARENA_BYTES, "arena_page": 4096}.get(kinds[index], 0)
        head["arena"] = [draw(st.integers(0, 3)), draw(st.integers(0, 4096))]
    entries, body = [], b""
    for name in draw(st.lists(names, max_size=3, unique=True)):
        entry, data = draw(honest_tensor(name, len(body), arena_len))
        entries.append(entry)
        body += data
    if entries:
        head["tensors"] = entries
    for _ in range(draw(st.integers(0, 2))):   # the hostile part
        target = draw(st.sampled_from(entries)) if entries and draw(st.integers(0, 3)) else head
        key = draw(st.sampled_from(sorted(HOSTILE)))
        if draw(st.integers(0, 4)) == 0:
            target.pop(key, None)
        else:
            target[key] = draw(HOSTILE[key])
    if draw(st.booleans()):
        body += draw(st.binary(max_size=16))
    head_bytes = json.dumps(head, separators=(",", ":")).encode()
    nfds = len(kinds) if draw(st.integers(0, 9)) else draw(st.integers(0, 70))
    header = HEADER.pack(MAGIC, VERSION, draw(frame_kinds), nfds, draw(request_ids),
                         len(head_bytes), len(body))
    return header + head_bytes + body, tuple(kinds)


# -- mutations and the stream ---------------------------------------------------------------------
@st.composite
def mutated(draw, data: bytes):
    data = bytearray(data)
    for _ in range(draw(st.integers(0, 3))):
        how = draw(st.sampled_from(["field", "flip", "cut", "insert"]))
        if how == "field" and len(data) >= HEADER.size:
            fields = list(HEADER.unpack_from(data))
            i = draw(st.integers(0, len(fields) - 1))
            widths = [None, 8, 8, 16, 64, 32, 64]
            fields[i] = draw(st.sampled_from([b"RTDG", b"\0\0\0\0", b"FDTR"])) if i == 0 else \
                draw(st.one_of(st.integers(0, 3), st.integers(0, 2 ** widths[i] - 1), st.just(2 ** widths[i] - 1)))
            if i in (5, 6) and fields[i] > 1 << 16:   # a claim of more than will come: the read ends in EOF
                fields[i] = draw(st.sampled_from([fields[i], len(data)]))
            data[: HEADER.size] = HEADER.pack(*fields)
        else:
            edit_bytes(draw, data, how)
    return bytes(data)


@st.composite
def streams(draw):
    sender_arena, segments = wire.Arena(), []
    try:
        for _ in range(draw(st.integers(1, 4))):
            which = draw(st.sampled_from(["encoded", "crafted", "crafted", "raw"]))
            if which == "encoded":
                data, kinds = draw(encoded(sender_arena))
            elif which == "crafted":
                data, kinds = draw(crafted())
            else:
                prefix = HEADER.pack(MAGIC, VERSION, draw(st.integers(0, 12)), 0, 1, draw(st.integers(0, 64)),
                                     draw(st.integers(0, 64))) if draw(st.booleans()) else b""
                data, kinds = prefix + draw(st.binary(max_size=128)), tuple(draw(st.lists(st.sampled_from(FD_KINDS), max_size=2)))
            if draw(st.integers(0, 3)) == 0:
                data = draw(mutated(data))
            cuts = sorted(draw(st.lists(st.integers(1, max(len(data) - 1, 1)), max_size=2, unique=True))) if len(data) > 1 else []
            parts = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)]) if data[a:b]] or [b""]
            carrier = 0 if draw(st.integers(0, 5)) else draw(st.integers(0, len(parts) - 1))
            segments += [Segment(p, kinds if i == carrier else ()) for i, p in enumerate(parts)]
    finally:
        sender_arena.close()
    return Stream([s for s in segments if s.data or s.fds], draw(st.booleans()))


def _buffer_range(a: np.ndarray) -> tuple[int, int]:
    """The address range of the bytes object or mapping an array's memory belongs to."""
    base = a
    while isinstance(base, np.ndarray):
        base = base.base
    assert isinstance(base, memoryview), f"array over {type(base).__name__}, not a view of the frame or arena"
    owner = np.frombuffer(base.obj, dtype=np.uint8)
    start = owner.__array_interface__["data"][0]
    return start, start + owner.nbytes


def check_frame(frame: wire.Frame) -> None:
    assert isinstance(frame.kind, Kind) and isinstance(frame.head, dict) and isinstance(frame.fds, list)
    assert not {"tensors", "arena", "arena_fd"} & set(frame.head)
    for name, a in frame.tensors.items():
        assert isinstance(name, str) and isinstance(a, np.ndarray)
        if a.dtype == object:
            assert all(isinstance(item, bytes) for item in a.reshape(-1))
            continue
        assert a.nbytes == int(np.prod(a.shape, dtype=object)) * a.dtype.itemsize
        assert not a.flags.writeable
        if a.size:
            lo, hi = _buffer_range(a)
            start = a.__array_interface__["data"][0]
            assert lo <= start and start + a.nbytes <= hi, f"{name}: [{start}, +{a.nbytes}) outside [{lo}, {hi})"
            a.tobytes()   # every byte is readable (an arena that shrank would fault here)


def send(sock: socket.socket, stream: Stream) -> None:
    """Write every segment (fds with its first byte); an empty segment with fds is skipped
    (a stream socket cannot carry fds without a byte)."""
    for segment in stream.segments:
        if not segment.data:
            continue
        fds = [make_fd(k) for k in segment.fds]
        try:
            ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
            sent = sock.sendmsg([segment.data], ancillary)
            if sent < len(segment.data):
                sock.sendall(segment.data[sent:])
        finally:
            for fd in fds:
                os.close(fd)


def socketpair() -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        a.setsockopt(socket.SOL_SOCKET, 32, 4 << 20)   # SO_SNDBUFFORCE: the whole stream fits before it is read
    except OSError:
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    return a, b


class bounded_address_space:
    """Within the block, an allocation beyond `extra` more bytes of address space fails with
    MemoryError instead of taking the shared host's memory."""

    def __init__(self, extra: int = 2 << 30):
        self.extra = extra

    def __enter__(self):
        self.saved = resource.getrlimit(resource.RLIMIT_AS)
        with open("/proc/self/statm") as f:
            used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        limit = used + self.extra
        if self.saved[0] == resource.RLIM_INFINITY or self.saved[0] > limit:
            resource.setrlimit(resource.RLIMIT_AS, (limit, self.saved[1]))
        return self

    def __exit__(self, *exc):
        resource.setrlimit(resource.RLIMIT_AS, self.saved)
