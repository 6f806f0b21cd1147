"""The supervisor↔worker wire format: one fixed header, a small bounded JSON head, and
tensors as raw bytes — inline for small ones, sealed memfds passed with SCM_RIGHTS for
large ones, so a 64 MB tensor crosses the boundary without being copied through the socket.

Frame = Header(magic, version, kind, fd count, request id, head length, body length)
        + head (UTF-8 JSON object, ≤ MAX_HEAD) + body (inline tensor bytes, ≤ MAX_BODY)
        + ancillary fds (≤ MAX_FDS).
The head lists tensors as {"name", "dtype", "shape", "fd" | "offset"}; the receiver checks
every length, dtype, shape and fd count against the bytes actually present before it
builds an array. Nothing here ever unpickles: numpy arrays are rebuilt from raw bytes.
"""
import array
import dataclasses
import enum
import fcntl
import json
import mmap
import os
import socket
import struct

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
INLINE_LIMIT = 1 << 16  # tensors at least this big travel as memfds
DTYPES = frozenset(("bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32",
                    "int64", "float16", "float32", "float64", "object"))


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
    tensors: dict  # name -> np.ndarray (read-only views over received bytes or mapped memfds)
    fds: list      # fds not consumed by tensors (e.g. the model memfd of LOAD); caller closes


def _protocol(detail: str) -> RtdError:
    return RtdError(Code.E_WORKER_PROTOCOL, detail)


def memfd_from(data) -> int:
    """A sealed memfd holding `data` (bytes-like). write(2) into the fresh memfd is about
    twice as fast as copying through a new shared mapping (no page faults on our side)."""
    view = memoryview(data).cast("B")
    fd = os.memfd_create("rtd-tensor", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        written = 0
        while written < view.nbytes:
            written += os.write(fd, view[written:])
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL)
    except BaseException:
        os.close(fd)
        raise
    return fd


def map_fd(fd: int, size: int) -> memoryview:
    """Read-only view of the first `size` bytes of `fd`; refuses an fd shorter than claimed."""
    actual = os.fstat(fd).st_size
    if actual < size:
        raise _protocol(f"memfd holds {actual} bytes, head claims {size}")
    if size == 0:
        return memoryview(b"")
    return memoryview(mmap.mmap(fd, size, prot=mmap.PROT_READ))


def _dtype_name(a: np.ndarray) -> str:
    name = a.dtype.name
    if name not in DTYPES or name == "object":
        raise RtdError(Code.E_REQUEST_INVALID, f"dtype {a.dtype} cannot cross the worker boundary")
    return name


def send(sock: socket.socket, kind: Kind, request_id: int, head: dict | None = None,
         tensors: dict | None = None, fds: list | None = None) -> None:
    """Send one frame. Tensors ≥ INLINE_LIMIT bytes go as fresh sealed memfds."""
    head = dict(head or {})
    described, body, owned, passed = [], [], [], list(fds or [])
    offset = 0
    try:
        for name, value in (tensors or {}).items():
            a = np.ascontiguousarray(value)
            entry = {"name": name, "dtype": _dtype_name(a), "shape": list(a.shape)}
            if a.nbytes >= INLINE_LIMIT:
                fd = memfd_from(a.reshape(-1).view(np.uint8) if a.nbytes else b"")
                owned.append(fd)
                entry["fd"] = len(passed)
                passed.append(fd)
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
    finally:
        for fd in owned:
            os.close(fd)


def _recv_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise EOFError("peer closed the socket")
        got += k
    return buf


def _recv_header(sock: socket.socket) -> tuple[bytes, list]:
    fds = array.array("i")
    data, anc, flags, _ = sock.recvmsg(HEADER.size, socket.CMSG_SPACE(MAX_FDS * fds.itemsize))
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


def recv(sock: socket.socket) -> Frame:
    """Receive and validate one frame; EOFError when the peer is gone."""
    header, fds = _recv_header(sock)
    try:
        magic, version, kind, nfds, request_id, head_len, body_len = HEADER.unpack(header)
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
        raw_head = _recv_exact(sock, head_len)
        body = memoryview(bytes(_recv_exact(sock, body_len))) if body_len else memoryview(b"")
        try:
            head = json.loads(raw_head) if head_len else {}
        except (ValueError, UnicodeDecodeError):
            raise _protocol("head is not JSON") from None
        if not isinstance(head, dict):
            raise _protocol("head is not a JSON object")
        tensors, used = _tensors(head.pop("tensors", []), body, fds)
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


def _tensors(entries, body: memoryview, fds: list) -> tuple[dict, set]:
    if not isinstance(entries, list):
        raise _protocol("tensors is not a list")
    out, used = {}, set()
    for e in entries:
        if not isinstance(e, dict) or not isinstance(e.get("name"), str) or e["name"] in out:
            raise _protocol("bad or duplicate tensor entry")
        dtype, shape = e.get("dtype"), e.get("shape")
        if dtype not in DTYPES or dtype == "object":
            raise _protocol(f"tensor {e['name']!r}: dtype {dtype!r} refused")
        if (not isinstance(shape, list) or len(shape) > MAX_RANK
                or not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 1 << 40 for d in shape)):
            raise _protocol(f"tensor {e['name']!r}: bad shape")
        nbytes = int(np.prod(shape, dtype=object)) * np.dtype(dtype).itemsize
        if nbytes > MAX_TENSOR_BYTES:
            raise _protocol(f"tensor {e['name']!r}: {nbytes} bytes exceeds the cap")
        if "fd" in e:
            i = e["fd"]
            if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < len(fds) or i in used:
                raise _protocol(f"tensor {e['name']!r}: bad fd index")
            used.add(i)
            data = map_fd(fds[i], nbytes)
        else:
            off = e.get("offset")
            if not isinstance(off, int) or isinstance(off, bool) or off < 0 or off + nbytes > len(body):
                raise _protocol(f"tensor {e['name']!r}: bytes outside the body")
            data = body[off: off + nbytes]
        out[e["name"]] = np.frombuffer(data, dtype=dtype).reshape(shape)
    return out, used
