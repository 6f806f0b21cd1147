"""The sandbox's control channels on rtd.wire frames: the zygote's requests and reports
(Kind.ZYGOTE), the confinement steps' reports and a spare's ready word (Kind.REPORT), and
a spare's job (Kind.JOB). Each runs on a SOCK_SEQPACKET socket, where one sendmsg is one
record: helper and worker share one report socket without interleaving, and a frame is one
record. Heads are held to MAX_HEAD so an honest record always fits the Reader's single
read (a longer record would be cut short silently); a record that is not one whole frame,
a frame that claims more, carries a body, or whose head has not the expected shape is
malformed: an RtdError(E_CONTAINMENT) for the reader, never a crash."""
import os
import socket

from rtd import wire
from rtd.errors import Code, RtdError

MAX_HEAD = 1 << 16   # far below wire.RECV_CHUNK: one recvmsg takes a whole record
NUMBER = (int, float)
OPTIONAL_INT = (int, type(None))
ERROR = {"code": str, "detail": str}


def socketpair() -> tuple[socket.socket, socket.socket]:
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)


def send(sock: socket.socket, kind: wire.Kind, head: dict, fds=()) -> None:
    """One frame as one record; refuses a head the peer's Reader would refuse."""
    out = wire.encode(kind, 0, head, fds=list(fds))
    if out.size > wire.HEADER.size + MAX_HEAD:
        raise RtdError(Code.E_CONTAINMENT, f"{kind.name} frame of {out.size} bytes exceeds the channel's bound")
    wire.write(sock, out)


def fits(value, shape) -> bool:
    """Whether JSON `value` has exactly `shape`: a dict of key -> shape (same keys), or a type
    or tuple of types matched exactly (so True is not an int)."""
    if isinstance(shape, dict):
        return (isinstance(value, dict) and value.keys() == shape.keys()
                and all(fits(value[k], s) for k, s in shape.items()))
    return type(value) in (shape if isinstance(shape, tuple) else (shape,))


def malformed(channel: str, detail: str) -> RtdError:
    return RtdError(Code.E_CONTAINMENT, f"malformed {channel}: {detail}")


def expect(frame: wire.Frame, kind: wire.Kind, channel: str) -> dict:
    """The head of a frame that must be of `kind` and carry no tensors and no fds (any fds
    that came are closed)."""
    passed, frame.fds = frame.fds, []
    for fd in passed:
        os.close(fd)
    if frame.kind is not kind or frame.tensors or passed:
        raise malformed(channel, f"{frame.kind.name} frame with {len(frame.tensors)} tensors and {len(passed)} fds")
    return frame.head


def error_head(e: RtdError) -> dict:
    return {"code": e.code.name, "detail": e.detail}


def error_of(value, channel: str) -> RtdError:
    """The RtdError an error head ({"code": <Code name>, "detail": str}) stands for."""
    if not fits(value, ERROR) or value["code"] not in Code.__members__:
        raise malformed(channel, f"bad error {value!r:.80}")
    return RtdError(Code[value["code"]], value["detail"])


def receive(sock: socket.socket, channel: str) -> wire.Frame:
    """The next record, which must be exactly one frame (blocking or not, as the socket is;
    EOFError when the peer is gone). Each record gets a Reader of its own, so a malformed
    one leaves nothing behind to spoil the next (its fds are closed)."""
    reader = wire.Reader(sock, max_head=MAX_HEAD, max_body=0)
    try:
        reader.pump()
        frame = reader.next()
    except RtdError as e:
        raise malformed(channel, e.detail) from None
    finally:
        reader.close()
    if frame is None or reader.buf:   # nothing completes a record that ends inside a frame
        for fd in frame.fds if frame else ():
            os.close(fd)
        raise malformed(channel, "a record that is not exactly one frame")
    return frame


def receive_head(sock: socket.socket, kind: wire.Kind, channel: str) -> dict:
    return expect(receive(sock, channel), kind, channel)
