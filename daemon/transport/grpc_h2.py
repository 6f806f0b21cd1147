"""gRPC over HTTP/2, served by rtd itself (h2 on asyncio), so the daemon owns every connection.

grpcio's server offers no hook on accept, no peer identity on a Unix socket and no word on
when a response has left the process; this transport has all three. On accept it reads
the Unix peer's uid (SO_PEERCRED) or the TCP address and refuses a connection past the
per-peer or the supervisor-wide cap (kept below the fd limit) before it costs more than
its fd. A connection that carries no authenticated call within `auth_timeout_s` is closed,
and so is one idle for `idle_timeout_s`. Each call is authenticated from its headers
before any of its body is accepted; its stream and the declared message size are charged
to the tenant (budgets.Ledger) before the flow-control window lets the body in. A response
is written only as fast as the client's window and the socket take it; until it has
left, it stays charged to the tenant (the front decides what — the request slot and the
response bytes ride along as `Reply.charges`), and a response that makes no progress for
`send_timeout_s` is reset. Deadlines (grpc-timeout) and client resets cancel the call's
task; what that task had started elsewhere is the handler's business. Streams opened and
reset faster than any client would are answered with GOAWAY (the rapid-reset attack).

Unary calls only: one request message, one response message, identity encoding.
"""
import asyncio
import collections
import logging
import struct
import time
import urllib.parse

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.frame_buffer
import h2.settings
import hpack
import hyperframe.frame

from rtd.daemon.transport.contract import (BACKOFF_MAX_S, BACKOFF_S, MAX_HEADER_LIST, WRITE_HIGH_WATER, Call,
                                           Method, Reply)
from rtd.errors import Code, RtdError

log = logging.getLogger("rtd.http2")
PREFIX = struct.Struct(">BI")       # gRPC message: compressed flag, length
GRPC_STATUS = {"OK": 0, "CANCELLED": 1, "UNKNOWN": 2, "INVALID_ARGUMENT": 3, "DEADLINE_EXCEEDED": 4, "NOT_FOUND": 5,
               "ALREADY_EXISTS": 6, "PERMISSION_DENIED": 7, "RESOURCE_EXHAUSTED": 8, "FAILED_PRECONDITION": 9,
               "ABORTED": 10, "OUT_OF_RANGE": 11, "UNIMPLEMENTED": 12, "INTERNAL": 13, "UNAVAILABLE": 14,
               "DATA_LOSS": 15, "UNAUTHENTICATED": 16}
TIMEOUT_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
FRAME_SIZE = 1 << 16
STREAM_WINDOW = 1 << 20
CONNECTION_WINDOW = 1 << 24
HPACK_TABLE = 4096       # the most response-header table a client may make the daemon keep (the RFC's default)
# h2 holds a header block's frames until END_HEADERS and measures the block only then: up to
# 64 CONTINUATION frames of FRAME_SIZE each, per connection, before authentication. A block
# within MAX_HEADER_LIST takes at most one CONTINUATION at this frame size.
h2.frame_buffer.CONTINUATION_BACKLOG = 1


def grpc_message(text: str) -> str:
    """Percent-encode a status message as the gRPC spec asks."""
    return urllib.parse.quote(text, safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~")


def parse_timeout(value: str) -> float | None:
    """grpc-timeout ("100m", "5S", ...) in seconds; None when malformed."""
    if not 2 <= len(value) <= 9 or value[-1] not in TIMEOUT_UNITS or not value[:-1].isascii() \
            or not value[:-1].isdigit():   # isdigit() alone takes "²"
        return None
    return int(value[:-1]) * TIMEOUT_UNITS[value[-1]]


def _chunks(views: list) -> list:
    """Runs of small parts joined (one DATA frame, not one per part); large ones stay views."""
    out, run = [], []
    for view in views:
        if len(view) < FRAME_SIZE:
            run.append(view)
            continue
        if run:
            out.append(memoryview(b"".join(run)))
            run = []
        out.append(view)
    if run:
        out.append(memoryview(b"".join(run)))
    return out


class _Stream:
    __slots__ = ("id", "method", "call", "charges", "body", "spool", "expected", "task", "timer", "pending", "trailers",
                 "last_progress", "done", "refused")

    def __init__(self, sid: int, method: Method, call: Call):
        self.id, self.method, self.call = sid, method, call
        self.charges: list = []     # budgets.Charge objects
        self.body, self.spool, self.expected = bytearray(), None, None
        self.task, self.timer = None, None
        self.pending: collections.deque = collections.deque()
        self.trailers, self.last_progress, self.done = None, time.monotonic(), False
        self.refused = False    # answered with a refusal that waits out the connection's back-off

    def release(self) -> None:
        for charge in self.charges:
            charge.release()
        self.charges.clear()
        if self.spool is not None:
            self.spool.close()


class Connection(asyncio.Protocol):
    """One client connection: its HTTP/2 state, streams and what it holds. `routes` is the gRPC
    front: `methods` ({path: Method}), `authenticate(metadata, method) -> payer` and
    `describe(RtdError) -> str` (the public text of a refusal)."""

    def __init__(self, table, routes, peer_of):
        self.table, self.routes, self.peer_of = table, routes, peer_of
        self.opened = 0.0
        self.peer, self.transport, self.paused, self.closed = "?", None, False, False
        self.streams: dict[int, _Stream] = {}
        self.payers: dict = {}      # tenant -> its connection charge
        self.authenticated, self.draining = False, False
        self.refusals = 0                        # budget refusals in a row on this connection
        self.unflushed = 0                       # response bytes given to h2 since the last write
        self.last_activity = time.monotonic()
        self.resets = collections.deque()
        # Headers stay bytes and h2 does not validate or normalise them (a third of a small
        # call's cost): rtd reads five of them itself and forwards none anywhere.
        config = h2.config.H2Configuration(client_side=False, header_encoding=None,
                                           validate_inbound_headers=False, normalize_inbound_headers=False,
                                           validate_outbound_headers=False, normalize_outbound_headers=False)
        self.h2 = h2.connection.H2Connection(config)

    # -- connection life -------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        try:
            self.peer = self.peer_of(sock)
        except OSError:
            self.peer = "?"
        if not self.table.admit(self):
            transport.abort()
            self.closed = True
            return
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        limits = self.table.limits
        self.h2.local_settings = h2.settings.Settings(client=False, initial_values={
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: limits.max_streams_per_connection,
            h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: MAX_HEADER_LIST,
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
            h2.settings.SettingCodes.MAX_FRAME_SIZE: FRAME_SIZE})
        self.h2.max_inbound_frame_size = FRAME_SIZE
        self.h2.decoder.max_header_list_size = MAX_HEADER_LIST
        self.h2.initiate_connection()
        self.h2.increment_flow_control_window(CONNECTION_WINDOW - 65535)
        self.flush()
        asyncio.get_running_loop().call_later(limits.auth_timeout_s, self._auth_expired)

    def _auth_expired(self) -> None:
        if not self.authenticated and not self.closed:
            self.close(h2.errors.ErrorCodes.NO_ERROR, "no authenticated call in time")

    def close(self, code=h2.errors.ErrorCodes.NO_ERROR, why: str = "") -> None:
        if self.closed:
            return
        try:
            self.h2.close_connection(code, additional_data=why.encode()[:200])
            self.flush()
        except h2.exceptions.ProtocolError:
            pass
        self.transport.close()
        self.closed = True

    def connection_lost(self, exc) -> None:
        self.closed = True
        for stream in list(self.streams.values()):
            self._drop(stream)
        for charge in self.payers.values():
            charge.release()
        self.payers.clear()
        self.table.forget(self)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        for stream in list(self.streams.values()):
            self._pump(stream)
        self.flush()

    def flush(self) -> None:
        self.unflushed = 0
        data = self.h2.data_to_send()
        if data and not self.transport.is_closing():
            self.transport.write(data)

    # -- inbound ---------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        self.last_activity = time.monotonic()
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError as e:
            self.close(h2.errors.ErrorCodes.PROTOCOL_ERROR, type(e).__name__)
            return
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                self._headers(event.stream_id, event.headers)
            elif isinstance(event, h2.events.DataReceived):
                self._data(event.stream_id, event.data, event.flow_controlled_length)
            elif isinstance(event, h2.events.StreamEnded):
                self._ended(event.stream_id)
            elif isinstance(event, h2.events.StreamReset):
                self._reset_by_client(event.stream_id)
            elif isinstance(event, h2.events.WindowUpdated):
                targets = self.streams.values() if event.stream_id == 0 else [self.streams.get(event.stream_id)]
                for stream in list(targets):
                    if stream is not None:
                        self._pump(stream)
            elif isinstance(event, (h2.events.PingReceived, h2.events.RemoteSettingsChanged)):
                self._count_abuse()
                if self.h2.encoder.header_table_size > HPACK_TABLE:   # the client may allow more; we keep less
                    self.h2.encoder.header_table_size = HPACK_TABLE
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.transport.close()
                return
            if self.closed:
                return
        self.flush()

    def _headers(self, sid: int, raw_headers) -> None:
        """Admit a call from its headers, or refuse it. Calls refused here cost the daemon work
        and the client nothing: they count toward dropping the connection, which also bounds
        what a client that never reads can make it buffer in refusals."""
        if not self._admit_headers(sid, raw_headers):
            self._count_abuse()

    def _admit_headers(self, sid: int, raw_headers) -> bool:
        headers = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in raw_headers]
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
            stream.timer = asyncio.get_running_loop().call_later(timeout, self._deadline_hit, stream)
        return True

    def _charge_payer(self, who: str, method: Method) -> None:
        if who not in self.payers:
            self.payers[who] = self.table.ledger.take(who, "connections", 1, control=method.control)

    def _data(self, sid: int, data: bytes, flow_length: int) -> None:
        stream = self.streams.get(sid)
        if stream is None or stream.task is not None or stream.refused:   # already answered: its data is dropped
            self._acknowledge(flow_length, sid)
            return
        stream.last_progress = time.monotonic()
        try:
            if stream.spool is not None:
                stream.spool.write(data)
            else:
                stream.body += data
            if stream.expected is None and len(stream.body) >= PREFIX.size:
                compressed, length = PREFIX.unpack_from(stream.body)
                if compressed:
                    raise RtdError(Code.E_REQUEST_INVALID, "compressed messages are not accepted")
                limit = stream.method.body_limit(self.table.limits)
                if length > limit:
                    raise RtdError(Code.E_MESSAGE_TOO_LARGE, f"{length} bytes, the limit is {limit}")
                if stream.method.spool:
                    stream.spool, charge = stream.method.spool(stream.call.who, length)
                    stream.charges.append(charge)
                    stream.spool.write(stream.body[PREFIX.size:])
                    del stream.body[PREFIX.size:]
                elif stream.call.who is not None:
                    stream.charges.append(self.table.ledger.take(stream.call.who, "request_bytes", length,
                                                                   control=stream.method.control))
                stream.expected = length
            if stream.expected is not None and self._received(stream) > stream.expected:
                raise RtdError(Code.E_REQUEST_INVALID, "one request message per call")
        except RtdError as e:
            self._fail(stream, e)
        self._acknowledge(flow_length, sid)

    def _acknowledge(self, flow_length: int, sid: int) -> None:
        try:
            self.h2.acknowledge_received_data(flow_length, sid)
        except h2.exceptions.ProtocolError:
            pass

    def _ended(self, sid: int) -> None:
        stream = self.streams.get(sid)
        if stream is None or stream.task is not None or stream.refused:
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
            self.table.take_turn(stream.call.who, lambda: self.start(stream))

    @staticmethod
    def _received(stream: _Stream) -> int:
        """Message bytes received so far (after the 5-byte prefix)."""
        return len(stream.spool) if stream.spool is not None else len(stream.body) - PREFIX.size

    def start(self, stream: _Stream) -> None:
        if not stream.done and not self.closed:
            stream.task = asyncio.get_running_loop().create_task(self._run(stream))

    def _reset_by_client(self, sid: int) -> None:
        stream = self.streams.get(sid)
        if stream is not None:
            self._drop(stream)
        self._count_abuse()

    def _count_abuse(self) -> None:
        """Resets, pings and settings changes cost us work and the client nothing: a client
        that sends more of them in a second than a well-behaved one ever would is dropped."""
        now = time.monotonic()
        self.resets.append(now)
        while self.resets and self.resets[0] < now - 1.0:
            self.resets.popleft()
        if len(self.resets) > 2 * self.table.limits.max_streams_per_connection:
            self.close(h2.errors.ErrorCodes.ENHANCE_YOUR_CALM, "too many resets, pings or settings")

    def _deadline_hit(self, stream: _Stream) -> None:
        if stream.done or self.streams.get(stream.id) is not stream:
            return
        if stream.pending or stream.trailers:   # already answering: the client resets it if it wants
            return
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
        finally:
            if not self.closed:
                self.flush()

    def _answer(self, stream: _Stream, reply: Reply) -> None:
        if stream.done or self.streams.get(stream.id) is not stream:
            for charge in reply.charges:
                charge.release()
            return
        self.refusals = 0
        views = [memoryview(p).cast("B") for p in reply.parts if memoryview(p).nbytes]
        stream.charges += reply.charges
        stream.pending.extend(_chunks([memoryview(PREFIX.pack(0, sum(len(v) for v in views))), *views]))
        stream.trailers = [("grpc-status", "0")]
        try:
            self.h2.send_headers(stream.id, [(":status", "200"), ("content-type", "application/grpc")])
        except h2.exceptions.ProtocolError:   # the client closed the stream (or the connection) meanwhile
            self._drop(stream)
            return
        self._pump(stream)

    def _pump(self, stream: _Stream) -> None:
        """Move as much of the response as the client's window and the socket take."""
        try:
            self._move(stream)
        except h2.exceptions.ProtocolError:   # the client closed the stream (or the connection) meanwhile
            self._drop(stream)

    def _move(self, stream: _Stream) -> None:
        sid = stream.id
        while stream.pending and not self.paused:
            room = min(self.h2.local_flow_control_window(sid), self.h2.max_outbound_frame_size)
            if room <= 0:
                return
            chunk = stream.pending[0]
            if len(chunk) > room:
                stream.pending[0], chunk = chunk[room:], chunk[:room]
            else:
                stream.pending.popleft()
            self.h2.send_data(sid, chunk)
            stream.last_progress = time.monotonic()
            self.unflushed += len(chunk)
            if self.unflushed >= FRAME_SIZE:   # the transport calls pause_writing() here once it holds enough
                self.flush()
        if not stream.pending and stream.trailers and not self.paused:
            self.h2.send_headers(sid, stream.trailers, end_stream=True)
            self._finish(stream)

    def _trailers_only(self, sid: int, status: str, message: str) -> None:
        """A refusal as the call's only headers; nothing when the client has closed the stream."""
        try:
            self.h2.send_headers(sid, [(":status", "200"), ("content-type", "application/grpc"),
                                       ("grpc-status", str(GRPC_STATUS[status])),
                                       # echoes client input: never indexed, so no client grows our table
                                       hpack.NeverIndexedHeaderTuple("grpc-message", grpc_message(message))],
                                  end_stream=True)
        except h2.exceptions.ProtocolError:
            pass

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
            asyncio.get_running_loop().call_later(delay, self._refuse_now, stream, error)
            return
        self._refuse_now(stream, error)

    def _refuse_now(self, stream: _Stream, error: RtdError) -> None:
        if stream.done or self.closed:
            return
        try:
            self._trailers_only(stream.id, error.code.status, self.routes.describe(error))
            if stream.task is None:   # the client may still be sending: tell it to stop
                self.h2.reset_stream(stream.id, h2.errors.ErrorCodes.NO_ERROR)
        except h2.exceptions.ProtocolError:
            pass
        self._finish(stream)
        self.flush()

    def _finish(self, stream: _Stream) -> None:
        stream.done = True
        stream.pending.clear()
        if stream.timer is not None:
            stream.timer.cancel()
        stream.release()
        self.streams.pop(stream.id, None)

    def _drop(self, stream: _Stream) -> None:
        """The stream is gone (client reset, connection lost, stalled): stop and release."""
        if stream.task is not None and not stream.task.done():
            stream.task.cancel()
        self._finish(stream)

    def busy(self) -> bool:
        return bool(self.streams)

    def goaway(self) -> None:
        """Tell the client to open no new streams while those it has finish. Written by hand:
        h2's own close_connection() would refuse to send the answers still owed."""
        if self.closed or self.draining:
            return
        self.draining = True
        frame = hyperframe.frame.GoAwayFrame(0)
        frame.last_stream_id, frame.error_code = self.h2.highest_inbound_stream_id, 0
        self.flush()
        self.transport.write(frame.serialize())

    def sweep(self, now: float) -> None:
        """Called every second: reset stalled responses, close idle connections."""
        limits = self.table.limits
        for stream in list(self.streams.values()):
            stalled = stream.pending or stream.task is None   # an answer not taken, or a body not sent
            if stalled and now - stream.last_progress > limits.send_timeout_s:
                try:
                    self.h2.reset_stream(stream.id, h2.errors.ErrorCodes.CANCEL)
                except h2.exceptions.ProtocolError:
                    pass
                self._drop(stream)
        if not self.streams and now - self.last_activity > limits.idle_timeout_s:
            self.close(h2.errors.ErrorCodes.NO_ERROR, "idle")
        elif not self.closed:
            self.flush()
