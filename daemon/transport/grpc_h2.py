"""gRPC over HTTP/2, served by rtd itself so the daemon owns every connection: libnghttp2's
framing, HPACK and flow control in C (h2session.py), rtd's policies here.

grpcio's server offers no hook on accept, no peer identity on a Unix socket and no word on
when a response has left the process; this transport has all three. On accept it reads
the Unix peer's uid (SO_PEERCRED) or the TCP address and is admitted by the connection table
(per-peer and supervisor-wide caps). A connection that carries no authenticated call within
`auth_timeout_s` is closed, and so is one idle for `idle_timeout_s`. Each call is
authenticated from its headers before any of its body is accepted; its stream and the
declared message size are charged to the tenant (budgets.Ledger) before its stream's window
opens past what any stream may send unasked (OPEN_WINDOW), and a body is read into memory
(or, for uploads, a spool file) only then. A response is written only as fast as the
client's window and the socket take it, its large parts as views of the reply itself; until
its last byte has been handed to the transport it stays charged to the tenant (the front
decides what — the request slot and the response bytes ride along as `Reply.charges`), and a
response that makes no progress for `send_timeout_s` is reset. Deadlines (grpc-timeout) and
client resets cancel the call's task; what that task had started elsewhere is the handler's
business.

Every frame a client sends costs from the connection's frame budget (h2session.py) — empty
DATA, WINDOW_UPDATE, PRIORITY, RST_STREAM, PING, SETTINGS, CONTINUATION, unknown types
alike — and so does each call refused at its headers; answered calls earn it back. Past it,
and past MAX_HEADER_LIST bytes of one header block, the connection gets
GOAWAY(ENHANCE_YOUR_CALM) and is closed. Before authentication a connection can make the
daemon hold one header block of at most MAX_HEADER_LIST (decoded as it arrives; at most 8
CONTINUATION frames), an HPACK table of the size it was told, its streams' first OPEN_WINDOW
bytes, and max_streams_per_connection streams.

Unary calls only: one request message, one response message, identity encoding.
"""
import asyncio
import logging
import struct
import time
import urllib.parse

from rtd.daemon.transport import h2session
from rtd.daemon.transport.contract import BACKOFF_MAX_S, BACKOFF_S, Call, Method, Reply
from rtd.daemon.transport.h2session import (CALL_CREDIT, CANCEL, CLOSED, DATA, END, ENHANCE_YOUR_CALM, GOAWAY, HEADER_LIST,
                                            HEADERS, INTERNAL_ERROR, NO_ERROR, OPEN_WINDOW, PROTOCOL_ERROR, REFUSAL_COST, SUNK)
from rtd.errors import Code, RtdError, storage_error

log = logging.getLogger("rtd.http2")
PREFIX = struct.Struct(">BI")       # gRPC message: compressed flag, length
GRPC_STATUS = {"OK": 0, "CANCELLED": 1, "UNKNOWN": 2, "INVALID_ARGUMENT": 3, "DEADLINE_EXCEEDED": 4, "NOT_FOUND": 5,
               "ALREADY_EXISTS": 6, "PERMISSION_DENIED": 7, "RESOURCE_EXHAUSTED": 8, "FAILED_PRECONDITION": 9,
               "ABORTED": 10, "OUT_OF_RANGE": 11, "UNIMPLEMENTED": 12, "INTERNAL": 13, "UNAVAILABLE": 14,
               "DATA_LOSS": 15, "UNAUTHENTICATED": 16}
TIMEOUT_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
FATAL = {h2session.ABUSE: (ENHANCE_YOUR_CALM, "too many frames"), HEADER_LIST: (ENHANCE_YOUR_CALM, "header list too large"),
         h2session.NOMEM: (INTERNAL_ERROR, "")}


def grpc_message(text: str) -> str:
    """Percent-encode a status message as the gRPC spec asks."""
    return urllib.parse.quote(text, safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~")


def parse_timeout(value: str) -> float | None:
    """grpc-timeout ("100m", "5S", ...) in seconds; None when malformed."""
    if not 2 <= len(value) <= 9 or value[-1] not in TIMEOUT_UNITS or not value[:-1].isascii() \
            or not value[:-1].isdigit():   # isdigit() alone takes "²"
        return None
    return int(value[:-1]) * TIMEOUT_UNITS[value[-1]]


class _Stream:
    __slots__ = ("id", "method", "call", "charges", "body", "spool", "expected", "task", "timer", "views", "answering",
                 "sent", "last_progress", "done", "refused")

    def __init__(self, sid: int, method: Method, call: Call):
        self.id, self.method, self.call = sid, method, call
        self.charges: list = []     # budgets.Charge objects
        self.body, self.spool, self.expected = bytearray(), None, None
        self.task, self.timer = None, None
        self.views: list = []       # the response's parts, read in place by the session until the stream closes
        self.answering, self.sent, self.last_progress, self.done = False, 0, time.monotonic(), False
        self.refused = False    # answered with a refusal that waits out the connection's back-off

    def release(self) -> None:
        for charge in self.charges:
            charge.release()
        self.charges.clear()
        if self.spool is not None:
            self.spool.close()


class Connection(asyncio.Protocol):
    """One client connection: its HTTP/2 session, streams and what it holds. `routes` is the gRPC
    front: `methods` ({path: Method}), `authenticate(metadata, method) -> payer`,
    `describe(RtdError) -> str` (the public text of a refusal)."""

    def __init__(self, table, routes, peer_of):
        self.table, self.routes, self.peer_of = table, routes, peer_of
        self.opened = 0.0
        self.peer, self.transport, self.session, self.loop = "?", None, None, None
        self.paused = self.closed = self.authenticated = self.draining = False
        self.streams: dict[int, _Stream] = {}
        self.payers: dict = {}      # tenant -> its connection charge
        self.refusals = 0           # budget refusals in a row on this connection
        self.reading = False        # events of the session are being handled: writes wait for the end
        self.write_wanted = False
        self.last_activity = time.monotonic()

    # -- connection life -------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.loop = asyncio.get_running_loop()   # once: each asyncio.get_running_loop() is a getpid() system call
        try:
            self.peer = self.peer_of(transport.get_extra_info("socket"))
        except OSError:
            self.peer = "?"
        if not self.table.admit(self):
            transport.abort()
            self.closed = True
            return
        transport.set_write_buffer_limits(high=h2session.WRITE_HIGH_WATER)
        self.session = h2session.Session(self.table.limits, lambda sid: self.streams[sid].views)
        self.flush()   # the server's SETTINGS
        self.loop.call_later(self.table.limits.auth_timeout_s, self._auth_expired)

    def _auth_expired(self) -> None:
        if not self.authenticated and not self.closed:
            self.close(NO_ERROR, "no authenticated call in time")

    def close(self, code: int = NO_ERROR, why: str = "") -> None:
        """GOAWAY and close now (after what is already written)."""
        if self.closed:
            return
        self.closed = True
        if self.session is not None:
            self.session.goaway(code, why)
            self.session.write(self.transport)   # the GOAWAY (events are moot now)
        self.transport.close()

    def connection_lost(self, exc) -> None:
        self.closed = True
        for stream in list(self.streams.values()):
            self._drop(stream)
        for charge in self.payers.values():
            charge.release()
        self.payers.clear()
        self.table.forget(self)
        if self.session is not None:
            self.session.close()
            self.session = None

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self.flush()

    def flush(self) -> None:
        """Hand the transport what is due, as far as it takes it."""
        if self.reading:
            self.write_wanted = True
            return
        if self.closed or self.session is None:
            return
        self.reading = True
        try:
            status = h2session.MORE
            while (status == h2session.MORE or self.write_wanted) and not self.paused and not self.closed:
                self.write_wanted = False
                status, events = self.session.write(self.transport)
                if events:
                    self._handle(events, None)
        finally:
            self.reading = False
        if status < 0 or status == h2session.OVER:   # nghttp2 ended the session (GOAWAY sent or received, nothing left)
            self.closed = True
            self.transport.close()

    # -- inbound ---------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self.last_activity = time.monotonic()
        self.reading = True
        try:
            status, events, stash = self.session.feed(data)
            if status:
                code, why = FATAL.get(status, (PROTOCOL_ERROR, "protocol error"))
                self._drop_connection(code, why) if code == ENHANCE_YOUR_CALM else self.close(code, why)
                return
            self._handle(events, stash)
        finally:
            self.reading = False
        self.flush()

    def _handle(self, events, stash) -> None:
        for kind, sid, a, b in events:
            if kind == DATA:
                self._data(sid, stash, a, b)
            elif kind == SUNK:
                self._sunk(sid, a, b)
            elif kind == HEADERS:
                self._headers(sid, stash[a:a + b])
            elif kind == END:
                self._ended(sid)
            elif kind == CLOSED:
                self._closed(sid, a)
            elif kind == GOAWAY:
                self.closed = True
                self.transport.close()
            if self.closed:
                return

    def _headers(self, sid: int, block: bytes) -> None:
        """Admit a call from its headers, or refuse it. Calls refused here cost the daemon work
        and the client nothing: they cost the connection's frame budget (REFUSAL_COST), which
        also bounds what a client that never reads can make it buffer in refusals."""
        if not self._admit_headers(sid, block) and not self.session.charge(REFUSAL_COST):
            self._drop_connection(ENHANCE_YOUR_CALM, "too many refused calls")

    def _drop_connection(self, code: int, why: str) -> None:
        """Close a connection past its budget, and say so (once per connection)."""
        self.table.refused["frame_budget"] += 1
        log.warning("closing an HTTP/2 connection of %s: %s", self.peer, why)
        self.close(code, why)

    def _admit_headers(self, sid: int, block: bytes) -> bool:
        items = block.decode("latin-1").split("\0")     # name, value, ..., "" (h2session.c lower-cases nothing:
        headers = list(zip(items[0:-1:2], items[1::2]))  # nghttp2 refuses upper-case names and NUL in values)
        fields = dict(headers)
        path = fields.get(":path", "")
        method = self.routes.methods.get(path)
        if fields.get(":method") != "POST" or not fields.get("content-type", "").startswith("application/grpc"):
            self._trailers_only(sid, "UNIMPLEMENTED", "gRPC over HTTP/2 POST only")
            return False
        if method is None:
            self._trailers_only(sid, "UNIMPLEMENTED", f"{Code.E_UNIMPLEMENTED.name}: {path[:100]} is not offered")
            return False
        if self.draining:
            self._trailers_only(sid, "UNAVAILABLE", f"{Code.E_MODEL_UNAVAILABLE.name}: the daemon is stopping")
            return False
        if fields.get("grpc-encoding", "identity") != "identity":
            self._trailers_only(sid, "UNIMPLEMENTED", "only identity encoding is accepted")
            return False
        timeout = parse_timeout(fields["grpc-timeout"]) if "grpc-timeout" in fields else None
        deadline = time.monotonic() + timeout if timeout is not None else None
        metadata = [(k, v) for k, v in headers if not k.startswith(":")]
        call = Call(path, metadata, None, deadline, peer=self.peer)
        stream = _Stream(sid, method, call)
        try:
            if not method.public:
                call.who = self.routes.authenticate(metadata, method)
                self._charge_payer(call.who, method)
                stream.charges.append(self.table.ledger.take(call.who, "streams", 1, control=method.control))
        except RtdError as e:
            stream.release()
            if e.code == Code.E_BUDGET_EXCEEDED:
                self.streams[sid] = stream
                self._fail(stream, e)
            else:
                self._trailers_only(sid, e.code.status, self.routes.describe(e))
            return False
        if call.who is not None and not self.authenticated:
            self.table.authenticated(self)
            self.authenticated = True
        self.streams[sid] = stream
        if timeout is not None:
            stream.timer = self.loop.call_later(timeout, self._deadline_hit, stream)
        return True

    def _charge_payer(self, who: str, method: Method) -> None:
        if who not in self.payers:
            self.payers[who] = self.table.ledger.take(who, "connections", 1, control=method.control)

    def _data(self, sid: int, stash, offset: int, length: int) -> None:
        """Body bytes of a call: kept once its declared size is charged (the stream's window
        opens then); a call already answered or refused has its bytes dropped."""
        stream = self.streams.get(sid)
        if stream is None or stream.task is not None or stream.refused or stream.done:
            self.session.consume(sid, length, False)
            return
        stream.last_progress = time.monotonic()
        chunk = memoryview(stash)[offset:offset + length]
        try:
            if stream.spool is not None:
                stream.spool.write(chunk)
                self._sink(stream)   # from where the file ends now
            else:
                stream.body += chunk
            if stream.expected is None and len(stream.body) >= PREFIX.size:
                self._declared(stream)
            if stream.expected is not None and self._received(stream) > stream.expected:
                raise RtdError(Code.E_REQUEST_INVALID, "one request message per call")
        except RtdError as e:
            self._fail(stream, e)
        self.session.consume(sid, length, not stream.refused and not stream.done)

    def _sunk(self, sid: int, length: int, error: int) -> None:
        """Body bytes the session wrote to the stream's file itself (and consumed); `error`: the
        errno that stopped it."""
        stream = self.streams.get(sid)
        if stream is None or stream.spool is None or stream.done:
            return
        stream.last_progress = time.monotonic()
        stream.spool.wrote(length)
        if error:
            self._fail(stream, storage_error(error, "spooling the body"))

    def _sink(self, stream: _Stream) -> None:
        """The rest of a body spooled to a file goes from the session straight there (up to the
        declared size: past it the bytes come as DATA, and the call is refused)."""
        if stream.spool.fd >= 0:
            self.session.sink(stream.id, stream.spool.fd, len(stream.spool), stream.expected)

    def _declared(self, stream: _Stream) -> None:
        """The message's prefix arrived: charge its declared size, then let the rest in."""
        compressed, length = PREFIX.unpack_from(stream.body)
        if compressed:
            raise RtdError(Code.E_REQUEST_INVALID, "compressed messages are not accepted")
        limit = stream.method.body_limit(self.table.limits)
        if length > limit:
            raise RtdError(Code.E_MESSAGE_TOO_LARGE, f"{length} bytes, the limit is {limit}")
        if stream.method.spool:
            stream.spool, charge = stream.method.spool(stream.call.who, length)
            stream.charges.append(charge)
            stream.spool.write(memoryview(stream.body)[PREFIX.size:])
            del stream.body[PREFIX.size:]
        elif stream.call.who is not None:
            stream.charges.append(self.table.ledger.take(stream.call.who, "request_bytes", length,
                                                         control=stream.method.control))
        stream.expected = length
        if stream.spool is not None:
            self._sink(stream)
        if PREFIX.size + length > OPEN_WINDOW:
            self.session.open_window(stream.id)

    def _ended(self, sid: int) -> None:
        stream = self.streams.get(sid)
        if stream is None or stream.task is not None or stream.refused or stream.done:
            return
        if stream.expected is None or self._received(stream) != stream.expected:
            self._fail(stream, RtdError(Code.E_REQUEST_INVALID, "the call ended before its message"))
            return
        # read in place by the handler
        stream.call.message = stream.spool if stream.spool is not None else memoryview(stream.body)[PREFIX.size:]
        stream.call.received = time.monotonic()
        if stream.method.public or stream.method.control:
            self.start(stream)   # cheap calls, and the operator's, never wait their turn
        else:
            self.table.take_turn(stream.call.who, self.loop, lambda: self.start(stream))

    @staticmethod
    def _received(stream: _Stream) -> int:
        """Message bytes received so far (after the 5-byte prefix)."""
        return len(stream.spool) if stream.spool is not None else len(stream.body) - PREFIX.size

    def start(self, stream: _Stream) -> None:
        if not stream.done and not self.closed:
            stream.task = self.loop.create_task(self._run(stream))

    def _closed(self, sid: int, code: int) -> None:
        """The stream closed: its answer went out whole (the call earns the connection's frame
        budget back), or the client reset it (or nghttp2 did, for a protocol error)."""
        stream = self.streams.get(sid)
        if stream is None:
            return
        if stream.answering and code == NO_ERROR:
            self.session.charge(-CALL_CREDIT)
            self._finish(stream)
        else:
            self._drop(stream)

    def _deadline_hit(self, stream: _Stream) -> None:
        if stream.done or stream.answering or self.streams.get(stream.id) is not stream:
            return   # already answering: the client resets it if it wants
        if stream.task is not None:
            stream.task.cancel()
        self._fail(stream, RtdError(Code.E_DEADLINE, "the client's deadline passed"))
        self.flush()

    # -- running and answering -------------------------------------------------------------
    async def _run(self, stream: _Stream) -> None:
        try:
            reply = await stream.method.handler(stream.call)
        except asyncio.CancelledError:
            return
        except RtdError as e:
            self._fail(stream, e)
        except Exception:
            log.exception("handler of %s failed", stream.call.method)
            self._fail(stream, RtdError(Code.E_INTERNAL))
        else:
            self._answer(stream, reply)
        self.flush()

    def _answer(self, stream: _Stream, reply: Reply) -> None:
        if stream.done or self.closed or self.streams.get(stream.id) is not stream:
            for charge in reply.charges:
                charge.release()
            return
        self.refusals = 0
        stream.charges += reply.charges
        stream.views = [view for view in (memoryview(p).cast("B") for p in reply.parts) if view.nbytes]
        if not self.session.respond(stream.id, stream.views):   # the client closed the stream meanwhile
            self._drop(stream)
            return
        stream.answering, stream.last_progress = True, time.monotonic()

    def _trailers_only(self, sid: int, status: str, message: str) -> None:
        """A refusal as the call's only headers (and RST_STREAM(NO_ERROR) when the client may
        still be sending); nothing when the client has closed the stream."""
        self.session.refuse(sid, GRPC_STATUS[status], grpc_message(message))

    def _fail(self, stream: _Stream, error: RtdError) -> None:
        """Refuse the call. A budget refusal waits out a back-off that doubles with each one
        in a row on the connection (BACKOFF_S up to BACKOFF_MAX_S): a client that retries at
        once would otherwise turn the shared loop into a refusal machine; it still gets its
        RESOURCE_EXHAUSTED, only later. The stream keeps its charges meanwhile."""
        if stream.done:
            return
        if error.code == Code.E_BUDGET_EXCEEDED and not stream.refused:
            stream.refused = True
            delay = min(BACKOFF_S * 2 ** self.refusals, BACKOFF_MAX_S)
            self.refusals += 1
            self.loop.call_later(delay, self._refuse_now, stream, error)
            return
        self._refuse_now(stream, error)

    def _refuse_now(self, stream: _Stream, error: RtdError) -> None:
        if stream.done or self.closed:
            return
        self._trailers_only(stream.id, error.code.status, self.routes.describe(error))
        self._finish(stream)
        self.flush()

    def _finish(self, stream: _Stream) -> None:
        stream.done = True
        if stream.timer is not None:
            stream.timer.cancel()
        if stream.spool is not None and stream.spool.fd >= 0 and self.session is not None:
            self.session.sink(stream.id, -1, 0, 0)   # before its file is closed: the session writes there no more
        stream.release()
        stream.views = []
        self.streams.pop(stream.id, None)

    def _drop(self, stream: _Stream) -> None:
        """The stream is gone (client reset, connection lost, stalled): stop and release. The
        session reads its response no more: the stream closed there, or was reset."""
        if stream.task is not None and not stream.task.done():
            stream.task.cancel()
        self._finish(stream)

    def busy(self) -> bool:
        return bool(self.streams)

    def goaway(self) -> None:
        """Tell the client to open no new streams while those it has finish."""
        if self.closed or self.draining:
            return
        self.draining = True
        self.session.goaway(NO_ERROR, "")
        self.flush()

    def sweep(self, now: float) -> None:
        """Called every second: reset stalled responses, close idle connections."""
        limits = self.table.limits
        for stream in list(self.streams.values()):
            if stream.answering:
                sent = self.session.sent(stream.id)
                if sent != stream.sent:
                    stream.sent, stream.last_progress = sent, now
            stalled = stream.answering or stream.task is None   # an answer not taken, or a body not sent
            if stalled and now - stream.last_progress > limits.send_timeout_s:
                self.session.reset(stream.id, CANCEL)
                self._drop(stream)
        if not self.streams and now - self.last_activity > limits.idle_timeout_s:
            self.close(NO_ERROR, "idle")
        else:
            self.flush()
