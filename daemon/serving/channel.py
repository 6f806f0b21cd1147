"""The supervisor's end of one worker's socket, on the event loop: requests go out as wire
frames, pipelined; each reply is matched to its request by id and resolves that request's
future. The worker is untrusted: its frames are read with tight bounds (inline bodies of a
reply are small, large tensors come through its sealed arena), a reply to no request, a
malformed frame or EOF ends the channel, and every request still waiting fails with the
reason. The arena region a request's inputs occupy is lent to the worker until it answers
that request."""
import array
import asyncio
import collections
import itertools
import os
import socket

from rtd import wire
from rtd.errors import Code, RtdError

MAX_REPLY_BODY = 2 * wire.MAX_INLINE_BODY
READS_PER_WAKEUP = 64


class Lost(RtdError):
    """The channel ended: EOF, a transport error or a protocol violation by the worker."""


class WorkerChannel:
    def __init__(self, sock: socket.socket, on_lost):
        sock.setblocking(False)
        self.sock, self.on_lost = sock, on_lost
        self.loop = asyncio.get_running_loop()
        # keep_fds: a tensor the worker sends in a sealed memfd of its own (a pipeline step's) stays an
        # unmapped fd here, passed on to the next step's worker, never read
        self.reader = wire.Reader(sock, wire.PeerArena(), lease=True, max_body=MAX_REPLY_BODY, keep_fds=True)
        self.arena = wire.Arena()
        self.ids = itertools.count(1)
        self.waiting: dict[int, tuple] = {}   # request id -> (future, arena region, on_done)
        self.outbox: collections.deque = collections.deque()   # [memoryview, fds]
        self.writing, self.lost = False, None
        self.loop.add_reader(sock.fileno(), self._readable)

    def request(self, kind: wire.Kind, head: dict | None = None, tensors: dict | None = None,
                fds: list | None = None, on_done=None) -> asyncio.Future:
        """Send one request; the future resolves to the reply frame (RtdError on ERROR or loss).
        `on_done(answered: bool)` runs when the worker is through with it — answered, or the
        channel lost — even if the future was cancelled meanwhile (the caller stopped waiting)."""
        future = self.loop.create_future()
        if self.lost is not None:
            future.set_exception(self.lost)
            if on_done is not None:
                on_done(False)
            return future
        if self.reader.peer.released:
            head = {**(head or {}), "released": self.reader.peer.take_released()}
        request_id = next(self.ids)
        out = wire.encode(kind, request_id, head, tensors, fds, self.arena)
        # the channel's own copies of the fds, closed once sent: the caller may close its fds
        # meanwhile (a request whose client went away), and an fd closed before it left would end the channel
        owned = []
        try:
            for fd in out.fds:
                owned.append(os.dup(fd))
        except OSError as e:   # the caller's fd is already gone (a package closed meanwhile): this request fails alone
            for fd in owned:
                os.close(fd)
            if out.region is not None:
                self.arena.release([out.region])
            if on_done is not None:
                on_done(False)
            future.set_exception(RtdError(Code.E_MODEL_UNAVAILABLE, f"a file of the request is gone ({e.strerror})"))
            return future
        self.waiting[request_id] = (future, out.region, on_done)
        self.outbox.append([memoryview(b"".join(wire._as_bytes(memoryview(p)) for p in out.parts)), owned])
        self._write()
        return future

    def _write(self) -> None:
        try:
            while self.outbox:
                data, fds = self.outbox[0]
                ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
                sent = self.sock.sendmsg([data], ancillary)
                for fd in fds:   # they went with the first byte
                    os.close(fd)
                self.outbox[0] = [data[sent:], []]
                if sent == len(data):
                    self.outbox.popleft()
        except BlockingIOError:
            if not self.writing:
                self.writing = True
                self.loop.add_writer(self.sock.fileno(), self._writable)
            return
        except OSError as e:
            self._lose(Lost(Code.E_WORKER_CRASHED, f"socket: {e.strerror}"))
            return
        if self.writing:
            self.writing = False
            self.loop.remove_writer(self.sock.fileno())

    def _writable(self) -> None:
        self._write()

    def _readable(self) -> None:
        # Read until the socket has nothing more (bounded, so a worker cannot hold the loop):
        # after an error event uvloop polls a socket no more, and the EOF behind a last
        # reply would go unseen.
        try:
            for _ in range(READS_PER_WAKEUP):
                self.reader.pump()
                while (frame := self.reader.next()) is not None:
                    self._reply(frame)
        except BlockingIOError:
            return
        except EOFError:
            self._lose(Lost(Code.E_WORKER_CRASHED, "the worker closed its socket"))
        except OSError as e:
            self._lose(Lost(Code.E_WORKER_CRASHED, f"socket: {e.strerror}"))
        except RtdError as e:
            self._lose(Lost(Code.E_WORKER_PROTOCOL, e.detail))
        except Exception as e:   # anything else the worker's bytes provoked is its fault too
            self._lose(Lost(Code.E_WORKER_PROTOCOL, f"{type(e).__name__}: {e}"))

    def _reply(self, frame: wire.Frame) -> None:
        for fd in frame.fds:
            os.close(fd)
        if frame.kind not in (wire.Kind.OK, wire.Kind.ERROR) or frame.request_id not in self.waiting:
            raise wire.protocol_error("reply to no request")   # every request still waiting fails with the channel
        entry = self.waiting.pop(frame.request_id)
        future, region, on_done = entry
        if region is not None:
            self.arena.release([region])   # the worker is done with this request's inputs
        if on_done is not None:
            on_done(frame.kind == wire.Kind.OK)
        if future.done():
            return
        if frame.kind == wire.Kind.ERROR:
            code = Code.__members__.get(str(frame.head.get("code")), Code.E_INTERNAL)
            future.set_exception(RtdError(code, str(frame.head.get("detail", ""))))
        else:
            future.set_result(frame)

    def _lose(self, error: RtdError) -> None:
        if self.lost is not None:
            return
        self.lost = error
        self.loop.remove_reader(self.sock.fileno())
        if self.writing:
            self.loop.remove_writer(self.sock.fileno())
        waiting, self.waiting = self.waiting, {}
        for future, _, on_done in waiting.values():
            if on_done is not None:
                on_done(False)
            if not future.done():
                future.set_exception(error)
                future.exception()   # retrieved: nobody may be waiting any more
        for _, fds in self.outbox:   # what never left
            for fd in fds:
                os.close(fd)
        self.outbox.clear()
        self.reader.close()
        self.sock.close()
        self.arena.close()
        self.on_lost(error)

    @property
    def in_flight(self) -> int:
        return len(self.waiting)

    def close(self) -> None:
        self._lose(Lost(Code.E_MODEL_UNAVAILABLE, "the instance was stopped"))
