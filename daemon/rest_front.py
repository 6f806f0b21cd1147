"""The REST front: KServe v2 (Open Inference Protocol) over HTTP/1.1, with Triton's routes and
its binary tensor extension, as `tritonclient.http` speaks it. Each handler only translates
JSON (and binary tensor bytes) onto the Supervisor API, as the gRPC front does; a refusal is
`{"error": "E_CODE: reason (detail)"}` with the HTTP status of the one table below.

Its connections live in the gRPC transport's table (http2.Server): the same per-peer and
supervisor-wide caps, the same sweep. Like a gRPC call, a request is authenticated from its
headers (`Authorization: Bearer <token>`) and its stream and declared body size are charged
to the tenant (budgets.Ledger) before any of its body is read: a body over
max_message_bytes is answered 413 from its Content-Length (and its `Expect: 100-continue`
never answered), chunked bodies are refused. The request head must arrive whole within
`auth_timeout_s` and at most MAX_HEAD bytes (a slowloris is dropped), a body or response
that makes no progress for `send_timeout_s` ends the connection, and so does
`idle_timeout_s` without a request. One request at a time: a client that sends the next
before its answer gets that answer and the connection is closed. A response stays charged
until the socket has taken all but WRITE_HIGH_WATER bytes of it, as on HTTP/2.

Statistics are those of the gRPC front (kserve.model_statistics). JSON is parsed on the event loop: a JSON part with more than MAX_JSON_VALUES values is
refused before it is parsed (large tensors travel with the binary extension), and so is a
JSON output that large.
"""
import asyncio
import base64
import binascii
import collections
import dataclasses
import http
import json
import logging
import re
import time
import urllib.parse

import httptools
import numpy as np
from google.protobuf import json_format

from rtd import __version__
from rtd.daemon import http2
from rtd.daemon.kserve import (EXTENSIONS, PROFILE_PARAMETER, SERVER_NAME, deadline_of, describe, load_parameters, model_statistics,
                               repository_index)
from rtd.daemon.tensors import decode_inputs, json_data, raw_bytes, raw_from_json
from rtd.errors import Code, RtdError

log = logging.getLogger("rtd.rest")
HTTP_STATUS = {"INVALID_ARGUMENT": 400, "FAILED_PRECONDITION": 400, "UNAUTHENTICATED": 401, "PERMISSION_DENIED": 403,
               "NOT_FOUND": 404, "RESOURCE_EXHAUSTED": 429, "INTERNAL": 500, "UNIMPLEMENTED": 501, "UNAVAILABLE": 503,
               "DEADLINE_EXCEEDED": 504, "ALREADY_EXISTS": 409,
               "CANCELLED": 499}   # by Code.status; Triton's where it has one (499: the client went away)
BY_CODE = {Code.E_MESSAGE_TOO_LARGE: 413}
MAX_HEAD = http2.MAX_HEADER_LIST
MAX_JSON_VALUES = 1 << 20
INFER_HEADER = "inference-header-content-length"
SINGLE_HEADERS = {"authorization", "content-length", "content-encoding", "transfer-encoding", "expect", INFER_HEADER}
MODEL = r"/v2/models/(?P<name>[^/]+)(?:/versions/(?P<version>[^/]+))?"
IDLE, HEAD, BODY, RUN, CLOSING = range(5)


def _bad(detail: str) -> RtdError:
    return RtdError(Code.E_REQUEST_INVALID, detail)


def _json(data: bytes | bytearray, what: str):
    """Bounded JSON: refused unparsed when it holds more than MAX_JSON_VALUES values (every
    value but the first takes a `,`, `[` or `{`); an empty body is an empty object."""
    if not data or data.isspace():
        return {}
    if data.count(b",") + data.count(b"[") + data.count(b"{") > MAX_JSON_VALUES:
        raise RtdError(Code.E_MESSAGE_TOO_LARGE, f"{what} holds more than {MAX_JSON_VALUES} JSON values "
                                                 "(send tensors with the binary tensor extension)")
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):   # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise _bad(f"{what} is not JSON") from None
    if not isinstance(doc, dict):
        raise _bad(f"{what} is not a JSON object")
    return doc


def _length(text: str) -> int | None:
    """A decimal byte count of at most 19 digits, or None."""
    return int(text) if 0 < len(text) < 20 and text.isascii() and text.isdigit() else None


def _field(doc: dict, key: str, kind, where: str, default=None):
    """doc[key] of `kind` (bool is no int here), `default` when absent, None if required."""
    if key not in doc:
        if default is None:
            raise _bad(f"{where}.{key}: required")
        return default
    value = doc[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise _bad(f"{where}.{key}: expected {kind.__name__}")
    return value


@dataclasses.dataclass(frozen=True)
class Tensor:
    name: str
    datatype: str
    shape: list


@dataclasses.dataclass
class Request:
    verb: str
    params: dict               # from the route
    headers: dict              # lower-case name -> value
    who: str | None            # the payer; None for public routes
    body: bytearray = dataclasses.field(default_factory=bytearray)


@dataclasses.dataclass
class Response:
    status: int
    parts: list = dataclasses.field(default_factory=list)
    json_length: int | None = None    # the JSON part, when binary tensors follow it
    charges: list = dataclasses.field(default_factory=list)   # held until the last byte has left
    code: Code | None = None          # a refusal's


def _ok(doc=None) -> Response:
    return Response(200, [] if doc is None else [json.dumps(doc).encode()])


def refusal(error: RtdError) -> Response:
    return Response(BY_CODE.get(error.code) or HTTP_STATUS[error.code.status], [json.dumps({"error": describe(error)}).encode()],
                    code=error.code)


class Front:
    """KServe v2 REST routes onto the Supervisor."""

    def __init__(self, supervisor):
        self.supervisor, self.ledger = supervisor, supervisor.ledger
        self.max_bytes = supervisor.config.limits.max_message_bytes
        public, control, work = dict(public=True), dict(control=True), {}
        self.routes = [(verb, re.compile(pattern), http2.Method(handler, **kind)) for verb, pattern, handler, kind in (
            ("GET", r"/v2/health/live", self.live, public), ("GET", r"/v2/health/ready", self.ready, public),
            ("GET", r"/v2", self.server_metadata, public),
            ("GET", r"/v2/models/stats", self.statistics, control), ("GET", MODEL + "/stats", self.statistics, control),
            ("GET", MODEL + "/ready", self.model_ready, control), ("GET", MODEL + "/config", self.model_config, control),
            ("GET", MODEL, self.model_metadata, control), ("POST", r"/v2/repository/index", self.index, control),
            ("POST", r"/v2/repository/models/(?P<name>[^/]+)/unload", self.unload, control),
            ("POST", MODEL + "/infer", self.infer, work), ("POST", r"/v2/repository/models/(?P<name>[^/]+)/load", self.load, work),
        )]

    def connection(self, server: http2.Server, peer_of) -> "Connection":
        return Connection(self, server, peer_of)

    def route(self, verb: str, target: str) -> tuple[http2.Method, dict]:
        path = target.split("?", 1)[0]
        for want, pattern, method in self.routes:
            match = pattern.fullmatch(path)
            if match and want == verb:
                return method, {k: urllib.parse.unquote(v) for k, v in match.groupdict().items() if v is not None}
        raise RtdError(Code.E_UNIMPLEMENTED, f"{verb} {path[:100]}")

    def _tenant(self, request: Request):
        return self.supervisor.tenants.by_id[request.who]

    # -- public ----------------------------------------------------------------------------------
    # The status answers (Triton's clients read only it); the JSON body is what KServe's own
    # REST client reads (`{"live": true}`, `{"ready": true}`, as KServe's model server sends).
    async def live(self, request):
        return _ok({"live": True})

    async def ready(self, request):
        if self.supervisor.ready():
            return _ok({"ready": True})
        return refusal(RtdError(Code.E_MODEL_UNAVAILABLE, "the daemon is not ready"))

    async def server_metadata(self, request):
        return _ok({"name": SERVER_NAME, "version": __version__, "extensions": EXTENSIONS})

    # -- control ---------------------------------------------------------------------------------
    async def model_ready(self, request):
        if self.supervisor.model_ready(self._tenant(request), request.params["name"], request.params.get("version", "")):
            return _ok()
        return refusal(RtdError(Code.E_MODEL_UNAVAILABLE, repr(request.params["name"])))

    async def model_metadata(self, request):
        return _ok(self.supervisor.metadata(self._tenant(request), request.params["name"], request.params.get("version", "")))

    async def model_config(self, request):
        config = self.supervisor.model_config(self._tenant(request), request.params["name"], request.params.get("version", ""))
        return _ok(json_format.MessageToDict(config, preserving_proto_field_name=True))

    async def statistics(self, request):
        stats = model_statistics(self.supervisor, self._tenant(request), request.params.get("name", ""),
                                 request.params.get("version", ""))
        return _ok({"model_stats": stats})

    async def index(self, request):
        ready = _field(_json(request.body, "the request"), "ready", bool, "request", False)
        return _ok(await repository_index(self.supervisor, self._tenant(request), ready))

    async def unload(self, request):
        _json(request.body, "the request")   # unload_dependents is accepted and ignored: rtd models have none
        await self.supervisor.unload(self._tenant(request), request.params["name"])
        return _ok()

    # -- work ------------------------------------------------------------------------------------
    async def load(self, request):
        doc = _json(request.body, "the request")
        request.body = bytearray()
        parameters = {}
        for key, value in _field(doc, "parameters", dict, "request", {}).items():
            if key.startswith("file:") and isinstance(value, str):   # tritonclient sends the files base64
                try:
                    value = base64.b64decode(value, validate=True)
                except binascii.Error:
                    raise _bad(f"load parameter {key[:100]!r}: not base64") from None
            parameters[key] = value
        del doc
        files, config = load_parameters(parameters)
        await self.supervisor.load(self._tenant(request), request.params["name"], files, config)
        return _ok()

    async def infer(self, request):
        body = request.body
        split = _length(request.headers.get(INFER_HEADER, str(len(body))))
        if split is None or split > len(body):
            raise _bad(f"{INFER_HEADER} is not a length within the body")
        doc = _json(bytes(memoryview(body)[:split]), "the inference header")
        arrays = self._inputs(doc, memoryview(body)[split:])
        parameters = _field(doc, "parameters", dict, "request", {})
        binary_all = _field(parameters, "binary_data_output", bool, "parameters", False)
        timeout = _field(parameters, "timeout", int, "parameters", 0)   # tritonclient's client_timeout, microseconds
        profile = _field(parameters, PROFILE_PARAMETER, bool, "parameters", False)
        if not 0 <= timeout < 1 << 63:
            raise _bad("parameters.timeout: microseconds, 0 to 2^63")
        wanted = {}
        for i, out in enumerate(_field(doc, "outputs", list, "request", [])):
            where = f"outputs[{i}]"
            if not isinstance(out, dict):
                raise _bad(f"{where}: expected an object")
            given = _field(out, "parameters", dict, where, {})
            if set(given) - {"binary_data"}:
                raise _bad(f"{where}: output parameters other than binary_data (classification, ...) are not offered")
            wanted[_field(out, "name", str, where)] = _field(given, "binary_data", bool, where, binary_all)
        request_id = _field(doc, "id", str, "request", "")
        del doc, body
        request.body = bytearray()
        result = await self.supervisor.infer(
            self._tenant(request), request.params["name"], request.params.get("version", ""), arrays, list(wanted) or None,
            deadline_of(None, timeout), encode=lambda version, outputs: self._encode(
                request, version, outputs, {"id": request_id} if request_id else {}, wanted, binary_all), profile=profile)
        text, parts, charge = result.encoded
        return Response(200, [text, *parts], len(text) if parts else None, [*result.charges, charge])

    def _encode(self, request: Request, version: str, outputs: dict, head: dict, wanted: dict, binary_all: bool):
        """The response: its JSON, the binary outputs after it, and the JSON's charge (new memory)."""
        head.update(model_name=request.params["name"], model_version=version, outputs=[])
        parts = []
        for name, value in outputs.items():
            row, raw = raw_bytes(name, value)
            entry = {"name": name, "datatype": row.kserve, "shape": list(np.shape(value))}
            if wanted.get(name, binary_all):
                entry["parameters"] = {"binary_data_size": memoryview(raw).nbytes}
                parts.append(raw)
            elif np.size(value) > MAX_JSON_VALUES:
                raise RtdError(Code.E_MESSAGE_TOO_LARGE, f"output {name!r} has more than {MAX_JSON_VALUES} values: "
                                                         "ask for it as binary_data")
            else:
                entry["data"] = json_data(value)
            head["outputs"].append(entry)
        text = json.dumps(head).encode()
        return text, parts, self.ledger.take(request.who, "response_bytes", len(text))

    def _inputs(self, doc: dict, binary: memoryview) -> dict:
        """The request's inputs as arrays: JSON `data`, or `binary_data_size` bytes of the binary
        part in input order, which they must use up exactly; checked by tensors.decode_inputs."""
        tensors, raws, offset = [], [], 0
        for i, given in enumerate(_field(doc, "inputs", list, "request")):
            where = f"inputs[{i}]"
            if not isinstance(given, dict):
                raise _bad(f"{where}: expected an object")
            name, datatype = _field(given, "name", str, where), _field(given, "datatype", str, where)
            shape = _field(given, "shape", list, where)
            if not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
                raise _bad(f"{where}.shape: expected a list of integers")
            parameters = _field(given, "parameters", dict, where, {})
            if set(parameters) - {"binary_data_size"}:
                raise _bad(f"{where}: tensor parameters other than binary_data_size (shared memory, ...) are not offered")
            if "binary_data_size" in parameters:
                size = _field(parameters, "binary_data_size", int, where)
                if "data" in given or not 0 <= size <= len(binary) - offset:
                    raise _bad(f"{where}: binary_data_size {size} with data, or past the binary part")
                raws.append(binary[offset:offset + size])
                offset += size
            else:
                raws.append(raw_from_json(name, datatype, _field(given, "data", list, where)))
            tensors.append(Tensor(name, datatype, shape))
        if offset != len(binary):
            raise _bad(f"{len(binary) - offset} bytes after the inference header that no input claims")
        return decode_inputs(tensors, raws, self.max_bytes)


class Connection(asyncio.Protocol):
    """One HTTP/1.1 client connection, in http2.Server's table of connections."""

    def __init__(self, front: Front, server: http2.Server, peer_of):
        self.front, self.server, self.peer_of = front, server, peer_of
        self.peer, self.transport, self.state = "?", None, IDLE
        self.parser = httptools.HttpRequestParser(self)
        self.payers = {}                          # tenant -> its connection charge
        self.charges = []                         # what the request in hand holds
        self.authenticated = self.draining = self.paused = False
        self.keep_alive, self.refusals, self.task, self.drained = True, 0, None, None
        self.head_since = self.last_progress = self.last_activity = time.monotonic()
        self.head_bytes, self.written = 0, 0
        self.url, self.headers, self.request, self.method = b"", [], None, None

    # -- connection life -------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        try:
            self.peer = self.peer_of(transport.get_extra_info("socket"))
        except OSError:
            self.peer = "?"
        if not self.server.admit(self):
            transport.abort()
            self.state = CLOSING
            return
        transport.set_write_buffer_limits(high=http2.WRITE_HIGH_WATER)
        asyncio.get_running_loop().call_later(self.server.limits.auth_timeout_s, self._auth_expired)

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
        self.server.forget(self)

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()   # after what is already written
        self.state = CLOSING

    def _release(self) -> None:
        for charge in self.charges:
            charge.release()
        self.charges.clear()

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
        limits = self.server.limits
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
            if self.head_bytes > MAX_HEAD:
                self._refuse(_bad(f"the request head exceeds {MAX_HEAD} bytes"))

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
        if length and self.request.headers.get("expect", "").lower() == "100-continue":
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def _admit(self) -> int:
        """Route, authenticate and charge a request from its head; returns its body length."""
        given = collections.Counter(name for name, _ in self.headers)
        if any(given[name] > 1 for name in SINGLE_HEADERS):
            raise _bad(f"one of {', '.join(sorted(SINGLE_HEADERS))} is given twice")
        headers, verb = dict(self.headers), self.parser.get_method().decode("latin-1")
        self.method, params = self.front.route(verb, self.url.decode("latin-1"))
        if self.draining:
            raise RtdError(Code.E_MODEL_UNAVAILABLE, "the daemon is stopping")
        if "transfer-encoding" in headers or headers.get("content-encoding", "identity") != "identity":
            raise _bad("send the body with a Content-Length and no content or transfer encoding")
        length = _length(headers.get("content-length", "0"))
        if length is None:
            raise _bad("Content-Length is not a length")
        limit = http2.PUBLIC_MESSAGE_BYTES if self.method.public else self.front.max_bytes
        if length > limit:
            raise RtdError(Code.E_MESSAGE_TOO_LARGE, f"{length} bytes, the limit is {limit}")
        who, ledger, control = None, self.server.ledger, self.method.control
        if not self.method.public:
            who = self.front.supervisor.tenants.authenticate(list(headers.items())).id
            if who not in self.payers:
                self.payers[who] = ledger.take(who, "connections", 1, control=control)
            self.authenticated = True
            self.charges.append(ledger.take(who, "streams", 1, control=control))
            if length:
                self.charges.append(ledger.take(who, "request_bytes", length, control=control))
        self.request = Request(verb, params, headers, who)
        return length

    def on_body(self, data: bytes) -> None:
        self.request.body += data

    def on_message_complete(self) -> None:
        self.state = RUN
        self.transport.pause_reading()
        self.task = asyncio.get_running_loop().create_task(self._run(self.request, self.method))
        self.request = None

    # -- answering -------------------------------------------------------------------------
    async def _run(self, request: Request, method: http2.Method) -> None:
        try:
            response = await method.handler(request)
        except RtdError as e:
            response = refusal(e)
        except Exception:
            log.exception("REST handler %s failed", method.handler.__name__)
            response = refusal(RtdError(Code.E_INTERNAL))
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

    async def _send(self, response: Response) -> None:
        self.charges += response.charges
        if response.code == Code.E_BUDGET_EXCEEDED:   # refusals in a row wait, as on gRPC
            await asyncio.sleep(min(http2.BACKOFF_S * 2 ** self.refusals, http2.BACKOFF_MAX_S))
            self.refusals += 1
        else:
            self.refusals = 0
        if self.state == CLOSING or self.transport.is_closing():
            return
        self.transport.writelines([self._head(response), *(memoryview(p).cast("B") for p in response.parts)])
        if self.paused:
            self.drained = asyncio.get_running_loop().create_future()
            await self.drained

    def _head(self, response: Response) -> bytes:
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
        response = refusal(error)
        if error.code == Code.E_BUDGET_EXCEEDED:
            delay = min(http2.BACKOFF_S * 2 ** self.refusals, http2.BACKOFF_MAX_S)
            asyncio.get_running_loop().call_later(delay, self._write_and_close, response)
        else:
            self._write_and_close(response)

    def _write_and_close(self, response: Response) -> None:
        if not self.transport.is_closing():
            self.transport.writelines([self._head(response), *response.parts])
            self.transport.close()


class _Stop(Exception):
    """Raised in a parser callback to stop parsing what the client sent."""

