"""The one framing of every supervisor↔child channel: the worker RPC, the fork server's
requests and reports, the confinement steps' reports, a spare's job and run_confined's
result. One fixed header, a small bounded JSON head, and tensors as raw bytes — inline for
small ones; large ones in the sender's *arena*, a reusable shared memfd the peer maps once
(its fd travels with SCM_RIGHTS in the first frame after it is created or grown), so a
64 MB tensor crosses with one copy into already-faulted shared pages.

Frame = Header(magic, version, kind, fd count, request id, head length, body length)
        + head (UTF-8 JSON object, ≤ max_head) + body (inline tensor bytes, ≤ max_body)
        + ancillary fds (≤ MAX_FDS), sent with the frame's first byte.
The head lists tensors as {"name", "dtype", "shape", "offset" | "at" | "fd"[, "nbytes"]}
("offset" into the body, "at" into the sender's arena, "fd" the index of a sealed memfd of the
frame's that holds it alone; "nbytes" for BYTES, which travel in Triton's length-prefixed form). A Reader checks every length, dtype, shape, fd count and arena bound
before it builds an array, and refuses an arena the sender could still shrink and a tensor's
memfd the sender could still change (a mapping of a shrunk memfd faults when read). Frames may be pipelined: a Reader takes any number
from one read and gives each exactly the fds that arrived with its first byte. Arrays
over the peer's arena are used in place; `lease=True` hands each region back (through
`PeerArena.released`) once the last array over it is gone. Nothing here ever unpickles.
"""
import array
import ctypes
import dataclasses
import enum
import fcntl
import json
import mmap
import os
import resource
import socket
import struct
import threading
import weakref

import numpy as np
import orjson

from rtd import dtypes
from rtd.errors import Code, RtdError

MAGIC = b"RTDF"
VERSION = 2
HEADER = struct.Struct("<4sBBHQIQ")  # magic, version, kind, nfds, request id, head len, body len
MAX_HEAD = 1 << 20
MAX_BODY = 1 << 26
MAX_FDS = 64
MAX_TENSOR_BYTES = 1 << 34
MAX_TENSORS = 4096
MAX_RANK = 16
MAX_ARENA = 1 << 34
INLINE_LIMIT = 1 << 16  # tensors at least this big travel through the arena
MAX_INLINE_BODY = 1 << 20  # with an arena, inline tensors stop at this much body: the rest go there too
RECV_CHUNK = 1 << 18
ALIGN = 64
_ARENA_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL
TENSOR_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE   # a tensor's memfd no one can change


class Kind(enum.IntEnum):
    LOAD = 1      # supervisor → worker: head {key}, fds [model memfd]
    INFER = 2     # supervisor → worker: head {key, outputs?}, tensors
    UNLOAD = 3    # supervisor → worker: head {key}
    PING = 4      # supervisor → worker: liveness
    OK = 5        # worker → supervisor: head (result), tensors
    ERROR = 6     # worker → supervisor: head {code, detail}
    ECHO = 7      # supervisor → worker: tensors sent straight back (transport benchmark)
    JOB = 8       # launcher → armed worker: head {target, args}, fds [its socket]
    REPORT = 9    # helper or worker → launcher: one confinement step, the worker's pid, its exit or an error
    ZYGOTE = 10   # supervisor ↔ fork server: head {op, ...}, fds (go sockets)
    RESULT = 11   # run_confined's child → caller: head {ok, result | rtd, detail | type, message}
    DECODE = 12   # supervisor → upload decoder: head {size, caps}, fds [a spooled REST load request, read-only]


_KINDS = {int(k): k for k in Kind}   # a dict lookup: Kind(n) costs a microsecond a frame
_FDS_SPACE = socket.CMSG_SPACE(MAX_FDS * array.array("i").itemsize)
_CTRUNC = int(socket.MSG_CTRUNC)   # an int: `flags & socket.MSG_CTRUNC` goes through enum.Flag's Python __and__


@dataclasses.dataclass
class Frame:
    kind: Kind
    request_id: int
    head: dict
    tensors: dict  # name -> np.ndarray (read-only views into the frame or the peer's arena)
    fds: list      # fds not consumed by the frame itself (e.g. LOAD's model memfd); caller closes


def protocol_error(detail: str) -> RtdError:
    return RtdError(Code.E_WORKER_PROTOCOL, detail)


def keep_large_buffers_warm() -> None:
    """Let glibc serve large allocations from the heap and keep freed memory, so a 64 MB
    buffer reuses faulted pages instead of mapping fresh ones (about 2× faster copies).
    For workers only: the fork server calls it, so the supervisor returns what it frees."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.mallopt(-4, 0)            # M_MMAP_MAX: no mmap-backed allocations
    libc.mallopt(-1, 1 << 30)      # M_TRIM_THRESHOLD: keep up to 1 GiB of freed heap


def release_freed_heap() -> None:
    """Give back what keep_large_buffers_warm keeps: once, after a worker's load, whose parse
    frees a model-sized protobuf that no request will reuse (malloc_trim: brk and madvise)."""
    ctypes.CDLL("libc.so.6", use_errno=True).malloc_trim(0)


def _as_bytes(view: memoryview):
    """The bytes of a contiguous buffer as a flat byte view (a copy only for 0-d and empty ones)."""
    return view.cast("B") if view.ndim and view.nbytes else view.tobytes()


def _padded(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


class Arena:
    """This side's reusable shared memory for large outgoing tensors. A frame's region stays
    *lent* until the peer releases it (or answers the request it belonged to), so the peer
    may use what it received in place; when nothing free is big enough, a larger arena (the
    next generation) replaces this one."""

    def __init__(self):
        self.fd, self.map, self.size, self.announced = -1, None, 0, False
        self.generation, self.cursor, self.lent = 0, 0, {}  # lent: start -> end

    def allocate(self, nbytes: int) -> int:
        for start in (self.cursor, 0):
            end = start + nbytes
            if end <= self.size and all(end <= s or start >= e for s, e in self.lent.items()):
                break
        else:
            self._grow(nbytes)
            start, end = 0, nbytes
        self.lent[start], self.cursor = end, end
        return start

    def _grow(self, nbytes: int) -> None:
        # a memfd counts as a file: RLIMIT_FSIZE (the sandbox sets one) caps each arena
        cap = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        cap = MAX_ARENA if cap == resource.RLIM_INFINITY else min(cap, MAX_ARENA)
        if nbytes > cap:
            raise RtdError(Code.E_RESOURCE_EXHAUSTED, f"{nbytes} bytes of tensors exceed the {cap}-byte file-size limit")
        size = min(cap, -(-max(nbytes, 2 * self.size, 1 << 20) // mmap.PAGESIZE) * mmap.PAGESIZE)
        fd = os.memfd_create("rtd-arena", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, size)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _ARENA_SEALS)   # the peer refuses an arena that could shrink
            mapping = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        self.close()
        self.fd, self.map, self.size, self.announced = fd, mapping, size, False
        self.generation, self.cursor, self.lent = self.generation + 1, 0, {}

    def release(self, regions) -> None:
        """Regions ([generation, start] pairs) the peer no longer uses; stale ones are ignored."""
        if not isinstance(regions, list) or len(regions) > 1 << 16:
            raise protocol_error("bad release list")
        for region in regions:
            if isinstance(region, list) and len(region) == 2 and region[0] == self.generation:
                self.lent.pop(region[1], None)

    def put(self, offset: int, data) -> None:
        view = _as_bytes(memoryview(data))
        self.map[offset: offset + view.nbytes] = view

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
        self.fd, self.map, self.size = -1, None, 0  # the mapping goes when its last view does


class _Lease:
    """One received frame's arena region, handed back when the last array over it is gone;
    this side's pages of it are dropped then (they stay the peer's), so what it read does not
    stay counted as its own resident memory."""

    def __init__(self, peer: "PeerArena", region: list, count: int, span: tuple[int, int]):
        self.peer, self.region, self.count, self.lock = peer, region, count, threading.Lock()
        self.mapping, self.span = peer.mapping, span

    def drop(self) -> None:
        with self.lock:
            self.count -= 1
            if self.count == 0:
                self.peer.released.append(self.region)
                start, end = -(-self.span[0] // mmap.PAGESIZE) * mmap.PAGESIZE, self.span[1] // mmap.PAGESIZE * mmap.PAGESIZE
                if end > start and not self.mapping.closed:
                    self.mapping.madvise(mmap.MADV_DONTNEED, start, end - start)


class PeerArena:
    """A read-only mapping of the peer's arena, replaced when the peer announces a new one,
    and the regions of it this side has finished with (to send back with the next frame)."""

    def __init__(self):
        self.view, self.mapping, self.size, self.released = None, None, 0, []

    def replace(self, fd: int) -> None:
        size = os.fstat(fd).st_size
        if not 0 < size <= MAX_ARENA:
            raise protocol_error(f"arena of {size} bytes refused")
        try:
            seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        except OSError:
            seals = 0
        if not seals & fcntl.F_SEAL_SHRINK:
            raise protocol_error("arena not sealed against shrinking")
        try:
            self.mapping = mmap.mmap(fd, size, prot=mmap.PROT_READ)
        except (OSError, ValueError) as e:   # e.g. an fd opened write-only
            raise protocol_error(f"arena cannot be mapped: {e}") from None
        self.view, self.size = memoryview(self.mapping), size

    def slice(self, at, nbytes: int) -> memoryview:
        if self.view is None or type(at) is not int or at < 0 or at + nbytes > self.size:
            raise protocol_error("tensor outside the peer's arena")
        return self.view[at: at + nbytes]

    def take_released(self) -> list:
        taken, self.released = self.released, []
        return taken


def map_fd(fd: int, size: int) -> memoryview:
    """Read-only view of the first `size` bytes of `fd`; refuses an fd shorter than claimed. Its
    page tables are filled at once (MAP_POPULATE): every caller reads it whole — a request's body,
    a model — and a fault a page made a 600 KB request 0.7–2 ms slower end to end (loaded host)."""
    actual = os.fstat(fd).st_size
    if actual < size:
        raise protocol_error(f"memfd holds {actual} bytes, head claims {size}")
    if size == 0:
        return memoryview(b"")
    return memoryview(mmap.mmap(fd, size, prot=mmap.PROT_READ, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE))


def _payload(name: str, value) -> tuple[str, list, list]:
    """(wire dtype, shape, the bytes to send as a list of flat byte views) of one tensor;
    0-d arrays stay 0-d. A `Blob` is a uint8 vector sent from its parts as they are."""
    if isinstance(value, Blob):
        return "uint8", [value.nbytes], value.parts
    a = np.asarray(value)
    row = dtypes.of_numpy(a.dtype)
    if row is None:
        raise RtdError(Code.E_REQUEST_INVALID, f"tensor {name!r}: dtype {a.dtype} cannot cross the worker boundary")
    if row.wire == "bytes":
        return row.wire, list(a.shape), [memoryview(dtypes.encode_bytes(a))]
    if a.dtype != row.numpy or not a.flags.c_contiguous:
        a = np.array(a, dtype=row.numpy, order="C")
    return row.wire, list(a.shape), [memoryview(_as_bytes(memoryview(a)))]


class FdTensor:
    """A tensor that travels in a file of its own (a sealed memfd), passed with the frame:
    never copied, never mapped by the sender. By default its bytes are one uint8 vector; a
    typed one names its wire dtype and shape (BYTES: Triton's length-prefixed form, `nbytes`
    long). One a Reader kept (`keep_fds`) owns its fd: closed by `close()` or when dropped,
    so it can be passed on to another peer unread."""

    def __init__(self, fd: int, nbytes: int, dtype: str = "uint8", shape: list | None = None, owned: bool = False):
        self.fd, self.nbytes, self.dtype = fd, nbytes, dtype
        self.shape = [nbytes] if shape is None else list(shape)
        self._closer = weakref.finalize(self, os.close, fd) if owned else None

    def close(self) -> None:
        if self._closer is not None:
            self._closer()


def sealed(name: str, value) -> FdTensor:
    """One array written once into a memfd of its own, then sealed against any change: what a
    worker hands on for another worker to map (the supervisor passes the fd, unread)."""
    wire_name, shape, parts = _payload(name, value)
    nbytes = sum(p.nbytes for p in parts)
    cap = resource.getrlimit(resource.RLIMIT_FSIZE)[0]   # past it the write would raise SIGXFSZ
    if cap != resource.RLIM_INFINITY and nbytes > cap:
        raise RtdError(Code.E_RESOURCE_EXHAUSTED, f"tensor {name!r}: {nbytes} bytes exceed the {cap}-byte file-size limit")
    fd = os.memfd_create("rtd-tensor", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        at = 0
        for part in parts:
            while part.nbytes:
                written = os.pwrite(fd, part, at)
                at, part = at + written, part[written:]
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, TENSOR_SEALS | fcntl.F_SEAL_SEAL)
    except BaseException:
        os.close(fd)
        raise
    return FdTensor(fd, nbytes, wire_name, shape, owned=True)


class Blob:
    """Bytes that travel as one uint8 tensor, given as parts (a message built piece by piece:
    each part is copied once, straight into the frame or the arena)."""

    def __init__(self, parts):
        self.parts = [memoryview(_as_bytes(memoryview(p))) for p in parts]
        self.nbytes = sum(p.nbytes for p in self.parts)


@dataclasses.dataclass
class Outgoing:
    """One encoded frame: what to write, the fds to pass with its first byte, and the arena
    region its tensors occupy (lent to the peer until released)."""
    parts: list
    fds: list
    region: list | None

    @property
    def size(self) -> int:
        return sum(memoryview(p).nbytes for p in self.parts)


def encode(kind: Kind, request_id: int, head: dict | None = None, tensors: dict | None = None,
           fds: list | None = None, arena: Arena | None = None) -> Outgoing:
    """Encode one frame; tensors ≥ INLINE_LIMIT bytes go through `arena` when one is given."""
    head = dict(head) if head else {}
    passed = list(fds) if fds else []
    described, placed, big, body, offset, inline = [], [], [], [], 0, 0
    for name, value in (tensors or {}).items():   # one pass, in order: every frame of every request comes here
        if isinstance(value, FdTensor):
            entry = {"name": name, "dtype": value.dtype, "shape": value.shape, "fd": len(passed)}
            if value.dtype == "bytes":
                entry["nbytes"] = value.nbytes
            passed.append(value.fd)
            placed.append(entry)
            continue
        wire_name, shape, parts = _payload(name, value)
        nbytes = sum(p.nbytes for p in parts)
        entry = {"name": name, "dtype": wire_name, "shape": shape}
        if wire_name == "bytes":
            entry["nbytes"] = nbytes
        if arena is not None and (nbytes >= INLINE_LIMIT or inline + nbytes > MAX_INLINE_BODY):
            big.append((entry, parts, nbytes))
        else:
            inline += nbytes
            entry["offset"] = offset
            body += parts
            offset += nbytes
        described.append(entry)
    region = None
    if big:
        at = arena.allocate(sum(_padded(nbytes) for _, _, nbytes in big))
        region = head["arena"] = [arena.generation, at]
        if not arena.announced:
            head["arena_fd"] = len(passed)
            passed.append(arena.fd)
            arena.announced = True
        for entry, parts, nbytes in big:
            entry["at"] = at
            for part in parts:
                arena.put(at, part)
                at += part.nbytes
            at = entry["at"] + _padded(nbytes)
    described += placed
    if described:
        head["tensors"] = described
    try:
        head_bytes = orjson.dumps(head)
    except orjson.JSONEncodeError:   # an int past 64 bits, which orjson refuses and json writes (a reader parses it as a float)
        head_bytes = json.dumps(head, separators=(",", ":")).encode()
    if len(head_bytes) > MAX_HEAD or offset > MAX_BODY or len(passed) > MAX_FDS:
        raise RtdError(Code.E_REQUEST_INVALID, "frame exceeds the wire's bounds")
    header = HEADER.pack(MAGIC, VERSION, int(kind), len(passed), request_id, len(head_bytes), offset)
    return Outgoing([header + head_bytes, *body], passed, region)


def write(sock: socket.socket, out: Outgoing) -> None:
    """Write an encoded frame on a blocking socket (stream or seqpacket)."""
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", out.fds))] if out.fds else []
    sent = sock.sendmsg(out.parts, ancillary)
    if sent < out.size:
        sock.sendall(b"".join(_as_bytes(memoryview(p)) for p in out.parts)[sent:])


def send(sock: socket.socket, kind: Kind, request_id: int = 0, head: dict | None = None,
         tensors: dict | None = None, fds: list | None = None, arena: Arena | None = None) -> list | None:
    """Encode and write one frame on a blocking socket; returns the arena region it lent."""
    out = encode(kind, request_id, head, tensors, fds, arena)
    write(sock, out)
    return out.region


def _close_all(fds) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


class Reader:
    """The receiving side of one channel: bytes and fds in, whole validated frames out.
    `pump` does one recvmsg (blocking or not, as the socket is); `next` returns the next
    complete frame or None; `recv` blocks for one. Limits are per channel, so the side
    that reads an untrusted worker can hold it to what a worker legitimately sends."""

    def __init__(self, sock: socket.socket, peer: PeerArena | None = None, lease: bool = False,
                 max_head: int = MAX_HEAD, max_body: int = MAX_BODY, keep_fds: bool = False):
        self.sock, self.peer, self.lease, self.keep_fds = sock, peer, lease, keep_fds
        self.max_head, self.max_body = max_head, max_body
        self.buf, self.start = bytearray(), 0   # start: stream offset of buf[0]
        self.scratch = None
        # Reads that brought fds: [first offset, end offset, fds]. The kernel hands a frame's
        # fds to the read that takes its first byte and ends that read within the frame, so
        # they belong to the one frame with fds that starts inside that read.
        self.fds: list[list] = []

    def pump(self) -> None:
        """One read; EOFError when the peer is gone (BlockingIOError passes through)."""
        if self.scratch is None:   # one buffer per channel: a fresh 256 KiB one per read is an mmap + faults
            self.scratch = bytearray(RECV_CHUNK)
        size, anc, flags, _ = self.sock.recvmsg_into([self.scratch], _FDS_SPACE)
        data = memoryview(self.scratch)[:size]
        received = []
        for level, ctype, cdata in anc:
            if level == socket.SOL_SOCKET and ctype == socket.SCM_RIGHTS:
                fds = array.array("i")
                fds.frombytes(cdata[: len(cdata) - (len(cdata) % fds.itemsize)])
                received += fds
        if flags & _CTRUNC:
            _close_all(received)
            raise protocol_error("too many fds in one frame")
        if not data:
            _close_all(received)
            raise EOFError("peer closed the channel")
        if received:
            self.fds.append([self.start + len(self.buf), self.start + len(self.buf) + len(data), received])
        self.buf += data

    def recv(self) -> Frame:
        while (frame := self.next()) is None:
            self.pump()
        return frame

    def next(self) -> Frame | None:
        if len(self.buf) < HEADER.size:
            return None
        magic, version, kind, nfds, request_id, head_len, body_len = HEADER.unpack_from(self.buf)
        if magic != MAGIC or version != VERSION:
            raise protocol_error("bad magic or version")
        if head_len > self.max_head or body_len > self.max_body or nfds > MAX_FDS:
            raise protocol_error("head, body or fds beyond what the channel allows")
        if kind not in _KINDS:
            raise protocol_error(f"unknown frame kind {kind}")
        kind = _KINDS[kind]
        total = HEADER.size + head_len + body_len
        if len(self.buf) < total:
            return None
        offset = self.start
        data = bytes(self.buf[:total])
        del self.buf[:total]
        self.start += total
        fds = []
        if nfds:
            owner = next((r for r in self.fds if r[0] <= offset < r[1]), None)
            if owner is not None:
                self.fds.remove(owner)
                fds = owner[2]
        if len(fds) != nfds or any(r[1] <= self.start for r in self.fds):
            _close_all(fds)
            self.close()
            raise protocol_error(f"header claims {nfds} fds, {len(fds)} arrived with the frame")
        return _parse(kind, request_id, data, head_len, fds, self.peer, self.lease, self.keep_fds)

    def close(self) -> None:
        for _, _, fds in self.fds:
            _close_all(fds)
        self.fds.clear()


def _parse(kind: Kind, request_id: int, data: bytes, head_len: int, fds: list, peer, lease: bool,
           keep_fds: bool = False) -> Frame:
    try:
        raw_head = data[HEADER.size: HEADER.size + head_len]
        body = memoryview(data)[HEADER.size + head_len:]
        try:
            head = orjson.loads(raw_head) if head_len else {}
        except orjson.JSONDecodeError:   # invalid UTF-8 and nesting past 1024 levels too
            raise protocol_error("head is not JSON") from None
        if not isinstance(head, dict):
            raise protocol_error("head is not a JSON object")
        used = set()
        if "arena_fd" in head:
            i = head.pop("arena_fd")
            if peer is None or type(i) is not int or not 0 <= i < len(fds):
                raise protocol_error("bad arena announcement")
            peer.replace(fds[i])
            used.add(i)
        region = head.pop("arena", None)
        kept = {} if keep_fds else None
        tensors, bases, span = _tensors(head.pop("tensors", []), body, peer, fds, used, kept)
        if region is not None:
            if not (isinstance(region, list) and len(region) == 2 and all(type(v) is int for v in region)):
                raise protocol_error("bad arena region")
            if lease and bases:
                holder = _Lease(peer, region, len(bases), span)
                for base in bases:
                    weakref.finalize(base, holder.drop)
            elif lease:
                peer.released.append(region)
        for i in used - set(kept or ()):
            os.close(fds[i])  # the mapping keeps the memory alive; the fd is no longer needed
        for i, (name, dtype, shape, nbytes) in (kept or {}).items():   # from here on each owns its fd
            tensors[name] = FdTensor(fds[i], nbytes, dtype, shape, owned=True)
        return Frame(kind, request_id, head, tensors, [fd for i, fd in enumerate(fds) if i not in used])
    except BaseException:
        _close_all(fds)
        raise


def _tensors(entries, body: memoryview, peer: PeerArena | None, fds: list, used: set,
             kept: dict | None = None) -> tuple[dict, list, tuple]:
    """{name: array}, the arrays that own arena memory (every view of them keeps them alive)
    and the arena span they cover. A tensor in an fd of the frame ("fd": its index) is mapped
    read-only; that fd is then `used` — or, given `kept`, left unmapped and recorded there
    ({index: (name, dtype, shape, nbytes)}) for the caller to wrap as an FdTensor."""
    if not isinstance(entries, list) or len(entries) > MAX_TENSORS:
        raise protocol_error("tensors is not a bounded list")
    out, bases, low, high = {}, [], MAX_ARENA, 0
    for e in entries:
        if not isinstance(e, dict) or not isinstance(e.get("name"), str) or e["name"] in out:
            raise protocol_error("bad or duplicate tensor entry")
        name, dtype, shape = e["name"], e.get("dtype"), e.get("shape")
        row = dtypes.BY_WIRE.get(dtype) if isinstance(dtype, str) else None
        if row is None:
            raise protocol_error(f"tensor {name!r}: dtype {dtype!r} refused")
        count = dtypes.element_count(shape) if (isinstance(shape, list) and len(shape) <= MAX_RANK
                                                and all(type(d) is int for d in shape)) else None
        if count is None:
            raise protocol_error(f"tensor {name!r}: bad shape")
        nbytes = e.get("nbytes") if row.wire == "bytes" else count * row.itemsize
        if type(nbytes) is not int or not 0 <= nbytes <= MAX_TENSOR_BYTES:
            raise protocol_error(f"tensor {name!r}: {nbytes} bytes exceeds the cap")
        if "at" in e:
            if peer is None:
                raise protocol_error(f"tensor {name!r}: arena tensor without an arena")
            data = peer.slice(e["at"], nbytes)
            low, high = min(low, e["at"]), max(high, e["at"] + nbytes)
        elif "fd" in e:
            i = e["fd"]
            if type(i) is not int or not 0 <= i < len(fds) or i in used:
                raise protocol_error(f"tensor {name!r}: bad fd index")
            used.add(i)
            try:
                seals = fcntl.fcntl(fds[i], fcntl.F_GET_SEALS)
            except OSError:
                seals = 0
            if seals & TENSOR_SEALS != TENSOR_SEALS:
                raise protocol_error(f"tensor {name!r}: its memfd is not sealed")
            if kept is not None:
                if os.fstat(fds[i]).st_size < nbytes:
                    raise protocol_error(f"tensor {name!r}: its memfd is shorter than {nbytes} bytes")
                kept[i] = (name, row.wire, list(shape), nbytes)
                out[name] = None   # replaced by its FdTensor once the whole frame parsed
                continue
            data = map_fd(fds[i], nbytes)[:nbytes]
        else:
            off = e.get("offset")
            if type(off) is not int or off < 0 or off + nbytes > len(body):
                raise protocol_error(f"tensor {name!r}: bytes outside the body")
            data = body[off: off + nbytes]
        if row.wire == "bytes":
            flat = dtypes.decode_bytes(data, count)
            if isinstance(flat, str):
                raise protocol_error(f"tensor {name!r}: {flat}")
            out[name] = flat.reshape(shape)
            continue
        flat = np.frombuffer(data, dtype=row.numpy)
        out[name] = flat.reshape(shape)
        if "at" in e:
            bases.append(flat)
    return out, bases, (low, high)
