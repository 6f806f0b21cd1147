"""REST over HTTP/1.1 (httptools), in the daemon's connection table beside gRPC's connections:
the same per-peer and table-wide caps, the same sweep and turns.

Like a gRPC call, a request is routed and authenticated from its head (the routes'
`route(verb, target)` and `authenticate(metadata, method)`) and its stream and declared body
size are charged to the tenant (budgets.Ledger) before any of its body is read: a body over
max_message_bytes is answered 413 from its Content-Length (and its `Expect: 100-continue`
never answered), chunked bodies are refused. The head must arrive whole within
`auth_timeout_s` and at most MAX_HEADER_LIST bytes (a slowloris is dropped), a body or
response that makes no progress for `send_timeout_s` ends the connection, and so does
`idle_timeout_s` without a request. One request at a time: a client that sends the next
before its answer gets that answer and the connection is closed. A response stays charged
until the socket has taken all but WRITE_HIGH_WATER bytes of it, as on HTTP/2. A refusal is
`{"error": "E_CODE: reason (detail)"}` with the HTTP status of the one table below.
"""
import asyncio
import collections
import http
import json
import logging
import time

import httptools

from rtd.daemon.transport.contract import BACKOFF_MAX_S, BACKOFF_S, MAX_HEADER_LIST, WRITE_HIGH_WATER, Call, Reply
from rtd.errors import Code, RtdError

log = logging.getLogger("rtd.rest")
HTTP_STATUS = {"INVALID_ARGUMENT": 400, "FAILED_PRECONDITION": 400, "UNAUTHENTICATED": 401, "PERMISSION_DENIED": 403,
               "NOT_FOUND": 404, "RESOURCE_EXHAUSTED": 429, "INTERNAL": 500, "UNIMPLEMENTED": 501, "UNAVAILABLE": 503,
               "DEADLINE_EXCEEDED": 504, "ALREADY_EXISTS": 409,
               "CANCELLED": 499}   # by Code.status; Triton's where it has one (499: the client went away)
BY_CODE = {Code.E_MESSAGE_TOO_LARGE: 413}
SINGLE_HEADERS = {"authorization", "content-length", "content-encoding", "transfer-encoding", "expect",
                  "inference-header-content-length"}
IDLE, HEAD, BODY, RUN, CLOSING = range(5)


def _bad(detail: str) -> RtdError:
    return RtdError(Code.E_REQUEST_INVALID, detail)


def length_of(text: str) -> int | None:
    """A decimal byte count of at most 19 digits, or None."""
    return int(text) if 0 < len(text) < 20 and text.isascii() and text.isdigit() else None


def refusal(error: RtdError, describe) -> Reply:
    """The reply to a refusal: its HTTP status and `{"error": "<describe(error)>"}`."""
    return Reply([json.dumps({"error": describe(error)}).encode()],
                 status=BY_CODE.get(error.code) or HTTP_STATUS[error.code.status], code=error.code)


class Connection(asyncio.Protocol):
    """One HTTP/1.1 client connection. `routes` is the REST front: `route(verb, target) ->
    (Method, params)`, `authenticate(metadata, method) -> payer`, `describe(RtdError) -> str`."""

    def __init__(self, table, routes, peer_of):
        self.table, self.routes, self.peer_of = table, routes, peer_of
        self.opened = 0.0
        self.peer, self.transport, self.state = "?", None, IDLE
        self.parser = httptools.HttpRequestParser(self)
        self.payers = {}                          # tenant -> its connection charge
        self.charges = []                         # what the request in hand holds
        self.authenticated = self.draining = self.paused = False
        self.keep_alive, self.refusals, self.task, self.drained = True, 0, None, None
        self.head_since = self.last_progress = self.last_activity = time.monotonic()
        self.head_bytes, self.written = 0, 0
        self.url, self.headers, self.request, self.method = b"", [], None, None
        self.expects_continue, self.spooled = False, None

    # -- connection life -------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        try:
            self.peer = self.peer_of(transport.get_extra_info("socket"))
        except OSError:
            self.peer = "?"
        if not self.table.admit(self):
            transport.abort()
            self.state = CLOSING
            return
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        asyncio.get_running_loop().call_later(self.table.limits.auth_timeout_s, self._auth_expired)

    def _auth_expired(self) -> None:
        if not self.authenticated and self.state in (IDLE, HEAD):
            self.close()

    def connection_lost(self, exc) -> None:
        self.state = CLOSING
        if self.task is not None:
            self.task.cancel()
        self._release()
        for charge in self.payers.values():
            charge.release()
        self.payers.clear()
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)
        self.table.forget(self)

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()   # after what is already written
        self.state = CLOSING

    def _release(self) -> None:
        for charge in self.charges:
            charge.release()
        self.charges.clear()
        if self.spooled is not None:
            self.spooled.close()
            self.spooled = None

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)

    def busy(self) -> bool:
        return self.state in (BODY, RUN)

    def goaway(self) -> None:
        """The daemon is stopping: an idle connection closes, a busy one after its answer."""
        self.draining = True
        if self.state in (IDLE, HEAD):
            self.close()

    def sweep(self, now: float) -> None:
        limits = self.table.limits
        if self.state == HEAD and now - self.head_since > limits.auth_timeout_s:
            self.transport.abort()   # a head trickled in (slowloris)
        elif self.state == BODY and now - self.last_progress > limits.send_timeout_s:
            self.transport.abort()
        elif self.paused or (self.state == CLOSING and self.transport.get_write_buffer_size()):
            size = self.transport.get_write_buffer_size()
            if size != self.written:
                self.written, self.last_progress = size, now
            elif now - self.last_progress > limits.send_timeout_s:
                self.transport.abort()   # a response the client takes nothing of
        elif self.state == IDLE and now - self.last_activity > limits.idle_timeout_s:
            self.close()

    # -- inbound ---------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self.state in (RUN, CLOSING):
            return
        self.last_activity = self.last_progress = time.monotonic()
        if self.state == IDLE:
            self.state, self.head_since, self.head_bytes = HEAD, self.last_activity, 0
        head = self.state == HEAD
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as e:
            if not isinstance(e.__context__, _Stop):   # a refusal or a pipelined request stops parsing
                log.exception("REST request parsing failed")
                self._refuse(RtdError(Code.E_INTERNAL))
            return
        except httptools.HttpParserError as e:
            self._refuse(_bad(f"not HTTP/1.1: {str(e)[:100]}"))
            return
        if head and self.state == HEAD:
            self.head_bytes += len(data)
            if self.head_bytes > MAX_HEADER_LIST:
                self._refuse(_bad(f"the request head exceeds {MAX_HEADER_LIST} bytes"))

    def eof_received(self) -> bool:
        """A client that half-closes after its request still gets the answer, then the close."""
        self.keep_alive = False
        return self.state == RUN

    def on_message_begin(self) -> None:
        if self.state == RUN:   # the next request before this one's answer
            self.keep_alive = False
            raise _Stop
        self.url, self.headers = b"", []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.decode("latin-1").lower(), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        self.state, self.keep_alive = BODY, self.parser.should_keep_alive()
        try:
            length = self._admit()
        except RtdError as e:
            self._refuse(e)
            raise _Stop from None
        if length and self.expects_continue:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def _admit(self) -> int:
        """Route, authenticate and charge a request from its head; returns its body length."""
        given = collections.Counter(name for name, _ in self.headers)
        if any(given[name] > 1 for name in SINGLE_HEADERS):
            raise _bad(f"one of {', '.join(sorted(SINGLE_HEADERS))} is given twice")
        headers, verb = dict(self.headers), self.parser.get_method().decode("latin-1")
        self.method, params = self.routes.route(verb, self.url.decode("latin-1"))
        if self.draining:
            raise RtdError(Code.E_MODEL_UNAVAILABLE, "the daemon is stopping")
        if "transfer-encoding" in headers or headers.get("content-encoding", "identity") != "identity":
            raise _bad("send the body with a Content-Length and no content or transfer encoding")
        length = length_of(headers.get("content-length", "0"))
        if length is None:
            raise _bad("Content-Length is not a length")
        limit = self.method.body_limit(self.table.limits)
        if length > limit:
            raise RtdError(Code.E_MESSAGE_TOO_LARGE, f"{length} bytes, the limit is {limit}")
        who, ledger, control = None, self.table.ledger, self.method.control
        if not self.method.public:
            who = self.routes.authenticate(self.headers, self.method)
            if who not in self.payers:
                self.payers[who] = ledger.take(who, "connections", 1, control=control)
            if not self.authenticated:
                self.table.authenticated(self)
                self.authenticated = True
            self.charges.append(ledger.take(who, "streams", 1, control=control))
            if length and not self.method.spool:
                self.charges.append(ledger.take(who, "request_bytes", length, control=control))
        body = bytearray()
        if self.method.spool:
            body, charge = self.method.spool(who, length)
            self.charges.append(charge)
            self.spooled = body
        self.expects_continue = headers.get("expect", "").lower() == "100-continue"
        self.request = Call(f"{verb} {self.url.decode('latin-1')[:200]}", self.headers, who, None, body, self.peer, params)
        return length

    def on_body(self, data: bytes) -> None:
        if self.spooled is None:
            self.request.message += data
            return
        try:
            self.spooled.write(data)
        except RtdError as e:
            self._refuse(e)
            raise _Stop from None

    def on_message_complete(self) -> None:
        self.state = RUN
        self.request.received = time.monotonic()
        self.transport.pause_reading()
        self.task = asyncio.get_running_loop().create_task(self._run(self.request, self.method))
        self.request = None

    # -- answering -------------------------------------------------------------------------
    async def _run(self, request: Call, method) -> None:
        try:
            response = await method.handler(request)
        except RtdError as e:
            response = refusal(e, self.routes.describe)
        except Exception:
            log.exception("REST handler %s failed", method.handler.__name__)
            response = refusal(RtdError(Code.E_INTERNAL), self.routes.describe)
        del request
        try:
            await self._send(response)
        finally:
            self._release()
        self.task = None
        if self.state == CLOSING:
            return
        if not self.keep_alive or self.draining:
            self.close()
            return
        self.state, self.last_activity = IDLE, time.monotonic()
        self.transport.resume_reading()

    async def _send(self, response: Reply) -> None:
        self.charges += response.charges
        if response.code == Code.E_BUDGET_EXCEEDED:   # refusals in a row wait, as on gRPC
            await asyncio.sleep(min(BACKOFF_S * 2 ** self.refusals, BACKOFF_MAX_S))
            self.refusals += 1
        else:
            self.refusals = 0
        if self.state == CLOSING or self.transport.is_closing():
            return
        self.transport.writelines([self._head(response), *(memoryview(p).cast("B") for p in response.parts)])
        if self.paused:
            self.drained = asyncio.get_running_loop().create_future()
            await self.drained

    def _head(self, response: Reply) -> bytes:
        size = sum(memoryview(p).nbytes for p in response.parts)
        lines = [f"HTTP/1.1 {response.status} {http.HTTPStatus(response.status).phrase}", f"Content-Length: {size}"]
        if response.json_length is not None:
            lines += ["Content-Type: application/octet-stream", f"Inference-Header-Content-Length: {response.json_length}"]
        elif size:
            lines.append("Content-Type: application/json")
        if not self.keep_alive or self.draining:
            lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    def _refuse(self, error: RtdError) -> None:
        """Refuse a request before its body is read: answer and close (the body never is)."""
        self._release()
        self.keep_alive, self.state = False, CLOSING
        self.transport.pause_reading()
        response = refusal(error, self.routes.describe)
        if error.code == Code.E_BUDGET_EXCEEDED:
            delay = min(BACKOFF_S * 2 ** self.refusals, BACKOFF_MAX_S)
            asyncio.get_running_loop().call_later(delay, self._write_and_close, response)
        else:
            self._write_and_close(response)

    def _write_and_close(self, response: Reply) -> None:
        if not self.transport.is_closing():
            self.transport.writelines([self._head(response), *response.parts])
            self.transport.close()


class _Stop(Exception):
    """Raised in a parser callback to stop parsing what the client sent."""

