"""Driving daemon/transport/grpc_h2.py's Connection without a socket: a transport that records what the
server writes and ends the connection the way asyncio's does (connection_lost on the next
loop turn), the real grpc_front.Front over a stand-in supervisor, and an h2 client that
writes requests and reads the answers."""
import asyncio
import hashlib
import io
import struct
import tempfile
from types import SimpleNamespace

import h2.config
import h2.connection

from rtd.daemon.fronts import grpc as grpc_front
from rtd.daemon.transport import grpc_h2
from rtd.daemon.transport.contract import TransportLimits
from rtd.daemon.transport.table import ConnectionTable
from rtd.daemon.serving.budgets import Ledger
from rtd.daemon.worker import kserve_codec
from rtd.daemon.observe.events import EventLog
from rtd.daemon.serving.tenants import Tenants
from rtd.errors import Code, RtdError

TOKEN, ADMIN = "good-token", "admin-token"
LIMITS = TransportLimits(max_message_bytes=1 << 20, max_connections=8, max_connections_per_peer=8, max_streams_per_connection=16,
                         auth_timeout_s=30.0, idle_timeout_s=60.0, send_timeout_s=30.0)
STATE_DIR = tempfile.mkdtemp(prefix="rtd-h2peer-")   # uploads spool here (unlinked files: nothing stays)
PER_TENANT = {"streams": 64, "connections": 8, "request_bytes": 4 << 20, "requests": 64, "package_bytes": 4 << 20}


class Transport:
    def __init__(self, protocol: asyncio.Protocol):
        self.protocol, self.written, self.closing = protocol, bytearray(), False

    def get_extra_info(self, name, default=None):
        return default

    def write(self, data) -> None:
        self.written += data

    def writelines(self, pieces) -> None:
        for piece in pieces:
            self.written += piece

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    abort = close

    def is_closing(self) -> bool:
        return self.closing

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


class Supervisor:
    """What the front reads of a Supervisor: the limits, the tenants (real token checks), and
    answers that need no model — inference echoes its inputs, the rest is NOT_FOUND."""

    def __init__(self, max_message_bytes: int = LIMITS.max_message_bytes):
        digest = hashlib.sha256(TOKEN.encode()).hexdigest()
        tenant = SimpleNamespace(id="acme", token_sha256=[digest], unsafe_anonymous=False)
        self.config = SimpleNamespace(limits=SimpleNamespace(max_message_bytes=max_message_bytes), tenants=[tenant],
                                      admin_token_sha256=[hashlib.sha256(ADMIN.encode()).hexdigest()],
                                      metrics_token_sha256=[], state_dir=STATE_DIR)
        self.ledger = Ledger(PER_TENANT, {}, ["acme"])
        self.tenants = Tenants(self.config)
        self.events = EventLog(io.StringIO())   # the front's audit lines, kept off the test's stderr

    def ready(self) -> bool:
        return True

    def model_ready(self, tenant, name, version="") -> bool:
        return False

    async def models(self, tenant) -> list:
        return []

    def status(self) -> dict:
        return {"ok": True}

    def _missing(self, tenant, name, *args):
        raise RtdError(Code.E_MODEL_NOT_FOUND, str(name)[:40])

    metadata = model_config = _missing

    async def unload(self, tenant, name):
        self._missing(tenant, name)

    async def load(self, tenant, name, files, config=None):
        raise RtdError(Code.E_SIG_MISSING, "the stand-in verifies nothing")

    async def infer(self, tenant, request):
        """Echo the inputs, decoded and encoded in this process by the worker's own codec."""
        body = request.body.view() if hasattr(request.body, "view") else request.body   # the transport's body, or bytes
        decoded = kserve_codec.decode_grpc(body, kserve_codec.Caps(self.config.limits.max_message_bytes))
        parts, _ = kserve_codec.encode_grpc(request.model, "1", decoded, decoded.inputs)
        return SimpleNamespace(version="1", body=b"".join(bytes(memoryview(p)) for p in parts), json_length=None, charges=[])


def server(supervisor: Supervisor | None = None) -> tuple[ConnectionTable, grpc_front.Front]:
    supervisor = supervisor or Supervisor()
    front = grpc_front.Front(supervisor, reload=lambda: None)
    return ConnectionTable(LIMITS, supervisor.ledger), front


def connect(table: ConnectionTable, front: grpc_front.Front) -> tuple[grpc_h2.Connection, Transport]:
    """A connection as accepted from a local peer (call inside the running loop)."""
    conn = grpc_h2.Connection(table, front, lambda sock: "uid:1000")
    transport = Transport(conn)
    conn.connection_made(transport)
    return conn, transport


def client() -> h2.connection.H2Connection:
    c = h2.connection.H2Connection(h2.config.H2Configuration(
        client_side=True, header_encoding=None, validate_outbound_headers=False, normalize_outbound_headers=False,
        validate_inbound_headers=False))
    c.initiate_connection()
    return c


def call_headers(path: bytes, token: str | None = TOKEN, extra=()) -> list:
    headers = [(b":method", b"POST"), (b":scheme", b"http"), (b":path", path), (b":authority", b"rtd"),
               (b"content-type", b"application/grpc"), (b"te", b"trailers")]
    if token is not None:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    return headers + list(extra)


def grpc_body(message: bytes) -> bytes:
    return struct.pack(">BI", 0, len(message)) + message


def statuses(c: h2.connection.H2Connection, written: bytes) -> dict:
    """{stream id: (grpc-status, grpc-message)} of the answers in what the server wrote."""
    out = {}
    for event in c.receive_data(bytes(written)):
        headers = getattr(event, "headers", None)
        if headers:
            fields = {bytes(k): bytes(v) for k, v in headers}
            if b"grpc-status" in fields:
                out[event.stream_id] = (fields[b"grpc-status"].decode(), fields.get(b"grpc-message", b"").decode())
    return out


def unary(c: h2.connection.H2Connection, method: str, message: bytes, token: str | None = TOKEN, extra=()) -> int:
    sid = c.get_next_available_stream_id()
    c.send_headers(sid, call_headers(f"/{grpc_front.SERVICE}/{method}".encode(), token, extra))
    c.send_data(sid, grpc_body(message), end_stream=True)
    return sid


async def settle(turns: int = 8) -> None:
    for _ in range(turns):
        await asyncio.sleep(0)


async def exchange(write) -> tuple:
    """`write(client)` queues a fresh client's frames (and returns what the caller wants back);
    the server gets them in one data_received, then the connection ends. Returns what write
    returned, what data_received raised (None), the answers (statuses(); none once the client
    has sent GOAWAY) and the exceptions of the tasks that read started."""
    conn, transport = connect(*server())
    c = client()
    wrote = write(c)
    tasks_before = asyncio.all_tasks()
    try:
        conn.data_received(c.data_to_send())
        raised = None
    except Exception as e:
        raised = e
    tasks = asyncio.all_tasks() - tasks_before
    await settle()
    transport.close()
    await settle()
    failed = [t.exception() for t in tasks if t.done() and not t.cancelled() and t.exception()]
    answers = {} if c.state_machine.state is h2.connection.ConnectionState.CLOSED else statuses(c, transport.written)
    return wrote, raised, answers, failed
