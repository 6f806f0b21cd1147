"""The supervisor↔worker wire format: one fixed header, a small bounded JSON head, and
tensors as raw bytes — inline for small ones, and for large ones in the sender's *arena*:
a reusable shared memfd the peer maps once (its fd travels with SCM_RIGHTS in the first
frame after it is created or grown), so a 64 MB tensor crosses the boundary with one copy
into already-faulted shared pages instead of through the socket.

Frame = Header(magic, version, kind, fd count, request id, head length, body length)
        + head (UTF-8 JSON object, ≤ MAX_HEAD) + body (inline tensor bytes, ≤ MAX_BODY)
        + ancillary fds (≤ MAX_FDS).
The head lists tensors as {"name", "dtype", "shape", "offset" | "at"} ("offset" into the
body, "at" into the sender's arena); the receiver checks every length, dtype, shape, fd
count and arena bound before it builds an array. The worker uses what it receives in
place and is done with it when it replies; the supervisor *leases* the worker's regions
(`recv(..., lease=True)`) and hands each back once its arrays are gone, so outputs are
never copied between the worker and the gRPC response. Nothing here ever unpickles.
"""
import array
import ctypes
import dataclasses
import enum
import json
import math
import mmap
import os
import resource
import socket
import struct
import threading
import weakref

import numpy as np

from rtd.errors import Code, RtdError

MAGIC = b"RTDF"
VERSION = 1
HEADER = struct.Struct("<4sBBHQIQ")  # magic, version, kind, nfds, request id, head len, body len
MAX_HEAD = 1 << 20
MAX_BODY = 1 << 26
MAX_FDS = 64
MAX_TENSOR_BYTES = 1 << 34
MAX_RANK = 16
MAX_ARENA = 1 << 34
INLINE_LIMIT = 1 << 16  # tensors at least this big travel through the arena
RECV_CHUNK = 1 << 18
ALIGN = 64
DTYPES = {name: np.dtype(name) for name in ("bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16",
                                            "int32", "int64", "float16", "float32", "float64")}
_NAMES = {dtype: name for name, dtype in DTYPES.items()}


class Kind(enum.IntEnum):
    LOAD = 1      # supervisor → worker: head {key}, fds [model memfd]
    INFER = 2     # supervisor → worker: head {key, outputs?}, tensors
    UNLOAD = 3    # supervisor → worker: head {key}
    PING = 4      # either way: liveness and usage
    OK = 5        # worker → supervisor: head (result), tensors
    ERROR = 6     # worker → supervisor: head {code, detail}
    ECHO = 7      # supervisor → worker: tensors sent straight back (transport benchmark)


@dataclasses.dataclass
class Frame:
    kind: Kind
    request_id: int
    head: dict
    tensors: dict  # name -> np.ndarray (read-only; arena views unless received with copy=True)
    fds: list      # fds not consumed by tensors (e.g. the model memfd of LOAD); caller closes


def _protocol(detail: str) -> RtdError:
    return RtdError(Code.E_WORKER_PROTOCOL, detail)


def keep_large_buffers_warm() -> None:
    """Let glibc serve large allocations from the heap and keep freed memory, so a 64 MB
    buffer reuses faulted pages instead of mapping fresh ones (about 2× faster copies).
    Call before forking the zygote so workers inherit it."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.mallopt(-4, 0)            # M_MMAP_MAX: no mmap-backed allocations
    libc.mallopt(-1, 1 << 30)      # M_TRIM_THRESHOLD: keep up to 1 GiB of freed heap


class Arena:
    """This side's reusable shared memory for large outgoing tensors. A frame's region stays
    *lent* until the peer releases it, so the peer may use what it received in place; when
    nothing free is big enough, a larger arena (the next generation) replaces this one."""

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
        fd = os.memfd_create("rtd-arena", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, size)
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
            raise _protocol("bad release list")
        for region in regions:
            if isinstance(region, list) and len(region) == 2 and region[0] == self.generation:
                self.lent.pop(region[1], None)

    def reclaim(self) -> None:
        """The peer replied and keeps nothing of ours: every region is free again."""
        self.lent.clear()

    def put(self, offset: int, a: np.ndarray) -> None:
        np.frombuffer(self.map, np.uint8, a.nbytes, offset)[:] = a.reshape(-1).view(np.uint8)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
        self.fd, self.map, self.size = -1, None, 0  # the mapping goes when its last view does


class _Lease:
    """One received frame's arena region, handed back when the last array over it is gone."""

    def __init__(self, peer: "PeerArena", region: list, count: int):
        self.peer, self.region, self.count, self.lock = peer, region, count, threading.Lock()

    def drop(self) -> None:
        with self.lock:
            self.count -= 1
            if self.count == 0:
                self.peer.released.append(self.region)


class PeerArena:
    """A read-only mapping of the peer's arena, replaced when the peer announces a new one,
    and the regions of it this side has finished with (to send back with the next frame)."""

    def __init__(self):
        self.view, self.size, self.released = None, 0, []

    def replace(self, fd: int) -> None:
        size = os.fstat(fd).st_size
        if not 0 < size <= MAX_ARENA:
            raise _protocol(f"arena of {size} bytes refused")
        self.view, self.size = memoryview(mmap.mmap(fd, size, prot=mmap.PROT_READ)), size

    def slice(self, at, nbytes: int) -> memoryview:
        if self.view is None or not isinstance(at, int) or isinstance(at, bool) or at < 0 or at + nbytes > self.size:
            raise _protocol("tensor outside the peer's arena")
        return self.view[at: at + nbytes]

    def take_released(self) -> list:
        taken, self.released = self.released, []
        return taken


def map_fd(fd: int, size: int) -> memoryview:
    """Read-only view of the first `size` bytes of `fd`; refuses an fd shorter than claimed."""
    actual = os.fstat(fd).st_size
    if actual < size:
        raise _protocol(f"memfd holds {actual} bytes, head claims {size}")
    if size == 0:
        return memoryview(b"")
    return memoryview(mmap.mmap(fd, size, prot=mmap.PROT_READ))


def _dtype_name(a: np.ndarray) -> str:
    name = _NAMES.get(a.dtype)
    if name is None:
        raise RtdError(Code.E_REQUEST_INVALID, f"dtype {a.dtype} cannot cross the worker boundary")
    return name


def send(sock: socket.socket, kind: Kind, request_id: int, head: dict | None = None,
         tensors: dict | None = None, fds: list | None = None, arena: Arena | None = None) -> None:
    """Send one frame; tensors ≥ INLINE_LIMIT bytes go through `arena` when one is given."""
    head = dict(head or {})
    described, body, passed = [], [], list(fds or [])
    arrays = {name: np.ascontiguousarray(value) for name, value in (tensors or {}).items()}
    big = {n for n, a in arrays.items() if arena is not None and a.nbytes >= INLINE_LIMIT}
    at = 0
    if big:
        at = arena.allocate(sum(-(-arrays[n].nbytes // ALIGN) * ALIGN for n in big))
        head["arena"] = [arena.generation, at]
        if not arena.announced:
            head["arena_fd"] = len(passed)
            passed.append(arena.fd)
    offset = 0
    for name, a in arrays.items():
        entry = {"name": name, "dtype": _dtype_name(a), "shape": list(a.shape)}
        if name in big:
            arena.put(at, a)
            entry["at"] = at
            at += -(-a.nbytes // ALIGN) * ALIGN
        else:
            entry["offset"] = offset
            body.append(a.tobytes())
            offset += a.nbytes
        described.append(entry)
    if described:
        head["tensors"] = described
    head_bytes = json.dumps(head, separators=(",", ":")).encode()
    if len(head_bytes) > MAX_HEAD or offset > MAX_BODY or len(passed) > MAX_FDS:
        raise RtdError(Code.E_REQUEST_INVALID, "frame exceeds the worker protocol's bounds")
    header = HEADER.pack(MAGIC, VERSION, int(kind), len(passed), request_id, len(head_bytes), offset)
    payload = b"".join([header, head_bytes, *body])
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", passed))] if passed else []
    sent = sock.sendmsg([payload], ancillary)
    if sent < len(payload):
        sock.sendall(memoryview(payload)[sent:])
    if "arena_fd" in head:
        arena.announced = True


def _recv_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise EOFError("peer closed the socket")
        got += k
    return buf


def _recv_first(sock: socket.socket) -> tuple[bytes, list]:
    """One recvmsg for the header, the fds and usually the whole frame (peers strictly
    alternate, so nothing of a next frame can be in the socket yet)."""
    fds = array.array("i")
    data, anc, flags, _ = sock.recvmsg(RECV_CHUNK, socket.CMSG_SPACE(MAX_FDS * fds.itemsize))
    for level, ctype, cdata in anc:
        if level == socket.SOL_SOCKET and ctype == socket.SCM_RIGHTS:
            fds.frombytes(cdata[: len(cdata) - (len(cdata) % fds.itemsize)])
    received = list(fds)
    if not data:
        for fd in received:
            os.close(fd)
        raise EOFError("peer closed the socket")
    if flags & socket.MSG_CTRUNC:
        for fd in received:
            os.close(fd)
        raise _protocol("too many fds in one frame")
    if len(data) < HEADER.size:
        data += _recv_exact(sock, HEADER.size - len(data))
    return bytes(data), received


def recv(sock: socket.socket, peer: PeerArena | None = None, lease: bool = False) -> Frame:
    """Receive and validate one frame; EOFError when the peer is gone. Arena tensors are
    views into `peer`: valid until the next frame, or with `lease` until the last array
    over them is gone (their region then goes back through `peer.released`)."""
    first, fds = _recv_first(sock)
    try:
        magic, version, kind, nfds, request_id, head_len, body_len = HEADER.unpack_from(first)
        if magic != MAGIC or version != VERSION:
            raise _protocol("bad magic or version")
        if nfds != len(fds) or nfds > MAX_FDS:
            raise _protocol(f"header claims {nfds} fds, {len(fds)} arrived")
        if head_len > MAX_HEAD or body_len > MAX_BODY:
            raise _protocol("head or body longer than the protocol allows")
        try:
            kind = Kind(kind)
        except ValueError:
            raise _protocol(f"unknown frame kind {kind}") from None
        total = HEADER.size + head_len + body_len
        if len(first) > total:
            raise _protocol("bytes after the end of the frame")
        frame = first + bytes(_recv_exact(sock, total - len(first))) if len(first) < total else first
        raw_head = frame[HEADER.size: HEADER.size + head_len]
        body = memoryview(frame)[HEADER.size + head_len:]
        try:
            head = json.loads(raw_head.decode()) if head_len else {}
        except (ValueError, UnicodeDecodeError):
            raise _protocol("head is not JSON") from None
        if not isinstance(head, dict):
            raise _protocol("head is not a JSON object")
        used = set()
        if "arena_fd" in head:
            i = head.pop("arena_fd")
            if peer is None or not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < len(fds):
                raise _protocol("bad arena announcement")
            peer.replace(fds[i])
            used.add(i)
        region = head.pop("arena", None)
        tensors, bases = _tensors(head.pop("tensors", []), body, peer)
        if region is not None:
            if not (isinstance(region, list) and len(region) == 2 and all(type(v) is int for v in region)):
                raise _protocol("bad arena region")
            if lease and bases:
                holder = _Lease(peer, region, len(bases))
                for base in bases:
                    weakref.finalize(base, holder.drop)
            elif lease:
                peer.released.append(region)
        rest = [fd for i, fd in enumerate(fds) if i not in used]
        for i in used:
            os.close(fds[i])  # the mapping keeps the memory alive; the fd is no longer needed
        return Frame(kind, request_id, head, tensors, rest)
    except BaseException:
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass
        raise


def _tensors(entries, body: memoryview, peer: PeerArena | None) -> tuple[dict, list]:
    """{name: array} and the arrays that own arena memory (every view of them keeps them alive)."""
    if not isinstance(entries, list):
        raise _protocol("tensors is not a list")
    out, bases = {}, []
    for e in entries:
        if not isinstance(e, dict) or not isinstance(e.get("name"), str) or e["name"] in out:
            raise _protocol("bad or duplicate tensor entry")
        dtype, shape = e.get("dtype"), e.get("shape")
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise _protocol(f"tensor {e['name']!r}: dtype {dtype!r} refused")
        if (not isinstance(shape, list) or len(shape) > MAX_RANK
                or not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 1 << 40 for d in shape)):
            raise _protocol(f"tensor {e['name']!r}: bad shape")
        nbytes = math.prod(shape) * DTYPES[dtype].itemsize
        if nbytes > MAX_TENSOR_BYTES:
            raise _protocol(f"tensor {e['name']!r}: {nbytes} bytes exceeds the cap")
        if "at" in e:
            if peer is None:
                raise _protocol(f"tensor {e['name']!r}: arena tensor without an arena")
            data = peer.slice(e["at"], nbytes)
        else:
            off = e.get("offset")
            if not isinstance(off, int) or isinstance(off, bool) or off < 0 or off + nbytes > len(body):
                raise _protocol(f"tensor {e['name']!r}: bytes outside the body")
            data = body[off: off + nbytes]
        flat = np.frombuffer(data, dtype=DTYPES[dtype])
        out[e["name"]] = flat.reshape(shape)
        if "at" in e:
            bases.append(flat)
    return out, bases
