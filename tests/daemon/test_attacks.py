"""Attacks on a real `rtd serve` (tenants acme and beta) beyond test_budgets, test_lifecycle,
test_durable, test_odds and the fuzzers: raw HTTP/2 frames an h2 client would never send,
the unauthenticated metrics listener, signal storms, and a second daemon on the same state
directory. Each test asserts what must hold: the daemon bounded, the other tenant unharmed,
refusals with an E_ code, nothing half done. A comment starting "Was:" names a bug these
attacks found and where it was."""
import concurrent.futures
import os
import signal
import socket
import struct
import subprocess
import threading
import time

import numpy as np
import pytest

from rtd.errors import Code, RtdError
from tests.daemon.conftest import RTD, mlp
from tests.daemon.test_budgets import rss
from tests.daemon.test_serving import reference

X = np.array([[1, 2, 3, 4], [0.5, -1, 2, 0]], np.float32)
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SERVICE = "/inference.GRPCInferenceService"
HEADERS, CONTINUATION, DATA, SETTINGS, GOAWAY = 0x1, 0x9, 0x0, 0x4, 0x7
END_STREAM, END_HEADERS = 0x1, 0x4
HEADER_TABLE_SIZE = 0x1


# -- raw HTTP/2 frames, written by hand so that nothing checks them on the way out ----------------
def frame(kind: int, flags: int, sid: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", sid) + payload


def literal(name: str, value: str) -> bytes:
    """HPACK literal never indexed, new name, no Huffman: stateless, so a block can be replayed."""
    n, v = name.encode(), value.encode()
    assert len(n) < 127 and len(v) < 127
    return b"\x10" + bytes([len(n)]) + n + bytes([len(v)]) + v


def request_block(path: str, token: str | None = None) -> bytes:
    fields = [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "rtd"),
              ("content-type", "application/grpc"), ("te", "trailers")]
    if token:
        fields.append(("authorization", f"Bearer {token}"))
    return b"".join(literal(k, v) for k, v in fields)


def raw_connect(path: str, settings=()) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    sock.sendall(PREFACE + frame(SETTINGS, 0, 0, b"".join(struct.pack(">HI", k, v) for k, v in settings)))
    return sock


class FrameReader(threading.Thread):
    """Reads the server's frames: the header blocks of the HEADERS frames that end a stream,
    in order, and the GOAWAY reasons and error codes."""

    def __init__(self, sock: socket.socket):
        super().__init__(daemon=True)
        self.sock, self.blocks, self.goaways, self.goaway_codes, self.closed = sock, [], [], [], False
        self.cv = threading.Condition()
        self.start()

    def run(self) -> None:
        buf = b""
        try:
            while data := self.sock.recv(1 << 20):
                buf += data
                while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
                    length, kind, flags = int.from_bytes(buf[:3], "big"), buf[3], buf[4]
                    payload, buf = buf[9:9 + length], buf[9 + length:]
                    with self.cv:
                        if kind == HEADERS and flags & END_STREAM:
                            self.blocks.append(payload)
                        elif kind == GOAWAY:
                            self.goaways.append(payload[8:].decode(errors="replace"))
                            self.goaway_codes.append(int.from_bytes(payload[4:8], "big"))
                        self.cv.notify_all()
        except OSError:
            pass
        with self.cv:
            self.closed = True
            self.cv.notify_all()

    def wait_for(self, answers: int, timeout: float = 30.0) -> None:
        with self.cv:
            self.cv.wait_for(lambda: len(self.blocks) >= answers or self.closed, timeout)
        assert len(self.blocks) >= answers, (len(self.blocks), self.goaways)


def threads_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Threads:"))


def fds_of(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def beta_serves(d) -> None:
    np.testing.assert_allclose(d.client("beta").infer("mlp", {"X": X}, timeout=30)["Y"],
                               reference(mlp(2), {"X": X})["Y"], rtol=1e-5, atol=1e-6)


@pytest.fixture
def served(fresh_daemon):
    d = fresh_daemon()
    d.client("acme").load("mlp", d.package("acme", mlp(1), "mlp"))
    d.client("beta").load("mlp", d.package("beta", mlp(2), "mlp"))
    return d


# -- findings ----------------------------------------------------------------------------------------
# Was: daemon/rtd_main.py:95 (and serve() at :142): nothing locks the state directory. A second
# `rtd serve` with the same config runs cleanup_instance() on the same cgroup instance id (the
# first daemon's workers are killed: a "crash" it counts toward crash_limit), unlinks the first
# daemon's socket and listens on its own, then dies with a traceback (OSError: Address already in
# use, metrics port) and unlinks that socket too: the first daemon keeps running, unreachable.
def test_a_second_daemon_on_the_same_state_dir_is_refused_and_the_first_is_untouched(served):
    d = served
    before = d.pids("acme")
    log = os.path.join(d.root, "second.log")
    with open(log, "wb") as err:
        second = subprocess.Popen([RTD, "serve", "--config", d.config], stdout=subprocess.DEVNULL, stderr=err)
    try:
        code = second.wait(timeout=60)
    except subprocess.TimeoutExpired:
        second.send_signal(signal.SIGTERM)
        second.wait(30)
        code = None
    with open(log, errors="replace") as f:
        said = f.read()
    assert code not in (None, 0), f"a second daemon on the same state dir kept running: {said[-500:]}"
    assert "Traceback" not in said and "E_" in said, said[-1500:]
    assert os.path.exists(d.socket), "the first daemon's socket was removed"
    assert d.pids("acme") == before, "the first daemon's workers were touched"
    assert "event=crash" not in d.read_log()
    np.testing.assert_allclose(d.client("acme").infer("mlp", {"X": X})["Y"], reference(mlp(1), {"X": X})["Y"],
                               rtol=1e-5, atol=1e-6)
    beta_serves(d)


# Was: daemon/http2.py:185-186 (connection_made: MAX_FRAME_SIZE 64 KiB, header list 16 KiB) with
# h2/frame_buffer.py CONTINUATION_BACKLOG = 64: a header block is buffered whole until
# END_HEADERS and only then measured against MAX_HEADER_LIST, so every connection, before any
# authentication, makes the daemon hold up to 64 x 64 KiB = 4 MiB that nothing charges
# (128 connections per uid: half a GiB; observed 431 MiB for 100 connections).
def test_unfinished_header_blocks_of_unauthenticated_connections_are_bounded(served):
    d = served
    pid, connections, per_connection = d.proc.pid, 24, 48
    beta_serves(d)
    base = rss(pid)
    chunk = b"\x00" * (1 << 16)
    socks = []
    try:
        for _ in range(connections):
            sock = raw_connect(d.socket)
            try:
                sock.sendall(frame(HEADERS, 0, 1, chunk) +
                             b"".join(frame(CONTINUATION, 0, 1, chunk) for _ in range(per_connection - 1)))
            except OSError:   # refused: the connection is closed, nothing held
                pass
            socks.append(sock)
        beta_serves(d)   # the frames above are all read by the time a later call is answered
        grown = rss(pid) - base
    finally:
        for sock in socks:
            sock.close()
    sent = connections * per_connection << 16
    assert grown < 16 << 20, f"{connections} unauthenticated connections sent {sent >> 20} MiB of one unfinished " \
                             f"header block each; the daemon grew by {grown >> 20} MiB"
    beta_serves(d)


# Was: daemon/http2.py:254 (data_received): a client's SETTINGS_HEADER_TABLE_SIZE goes unchecked
# into h2's HPACK encoder (h2/connection.py:1456-1458), so the daemon keeps every response header it
# ever sent on that connection, up to the 4 GiB the client names — every refusal's grpc-message,
# which echoes the client's path — and hpack's HeaderTable.search() scans that table linearly for
# every header of every response: memory held per connection at the client's choice, and CPU
# per answer on the shared event loop that grows with it (throughput fell ~6x at 9,000 entries).
def test_the_hpack_table_the_daemon_keeps_for_a_client_is_capped(served):
    d = served
    sock = raw_connect(d.socket, [(HEADER_TABLE_SIZE, 1 << 31)])
    reader = FrameReader(sock)
    token = d.tokens["acme"]
    try:
        sock.sendall(frame(HEADERS, END_HEADERS, 1, request_block(f"{SERVICE}/RepositoryIndex", token)) +
                     frame(DATA, END_STREAM, 1, b"\0\0\0\0\0"))   # an authenticated call: the connection stays
        reader.wait_for(1)   # answered by a task: refusals below are answered at once, so wait for it
        sid, sent = 3, 1

        def call(path: str) -> None:
            nonlocal sid, sent
            sock.sendall(frame(HEADERS, END_STREAM | END_HEADERS, sid, request_block(path, token)))
            sid, sent = sid + 2, sent + 1

        probe = "/p/" + "0" * 100
        call(probe)
        reader.wait_for(sent)
        first = reader.blocks[-1]
        for i in range(3):   # distinct refusals, paced below the rate at which refusals drop a connection
            for j in range(50):
                call(f"/p/{i:04d}{j:04d}" + "1" * 92)
            reader.wait_for(sent - 20)
            time.sleep(1.1)
        call(probe)
        reader.wait_for(sent)
        again = reader.blocks[-1]
    finally:
        sock.close()
    assert reader.goaways == []
    assert len(again) > len(first) // 2, (
        f"the answer to the first path, repeated after 150 others, took {len(again)} bytes of header block "
        f"(first time {len(first)}): the daemon indexes what clients send it back, at their table size")
    beta_serves(d)


# Was: daemon/metrics.py:137 (Metrics.serve: prometheus_client.start_http_server): the metrics
# listener spawns one thread per connection, with no cap and no timeout, for any local user (no
# token): each connection that never finishes its request holds a daemon thread and fd forever,
# outside max_connections and the fd reserve kept for workers (rtd_main.py FD_RESERVE_FRACTION).
def test_metrics_connections_that_never_finish_a_request_are_bounded(served):
    d = served
    pid = d.proc.pid
    threads, fds = threads_of(pid), fds_of(pid)
    socks = []

    def idle(_):
        sock = socket.create_connection(("127.0.0.1", d.metrics_port))
        socks.append(sock)
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")   # never the blank line
    try:
        with concurrent.futures.ThreadPoolExecutor(50) as pool:   # in parallel: the listen backlog is 5
            list(pool.map(idle, range(100)))
        beta_serves(d)
        deadline = time.monotonic() + 10   # a read timeout may close them instead of a cap
        while time.monotonic() < deadline and (threads_of(pid) - threads > 64 or fds_of(pid) - fds > 64):
            time.sleep(0.5)
        held = threads_of(pid) - threads, fds_of(pid) - fds
    finally:
        for sock in socks:
            sock.close()
    assert held[0] <= 64 and held[1] <= 64, f"100 idle metrics connections hold {held[0]} threads and {held[1]} fds"
    assert d.metric("nv_inference_request_success") >= 1
    beta_serves(d)


# -- attacks that are handled: no finding, kept as regressions -----------------------------------------
def test_a_sighup_storm_while_serving_changes_nothing_and_fails_no_call(served):
    d = served
    errors, done, stop = [], [0], threading.Event()

    def calm():
        while not stop.is_set():
            try:
                beta_serves(d)
                done[0] += 1
            except (RtdError, AssertionError) as e:
                errors.append(e)
    worker = threading.Thread(target=calm)
    worker.start()
    try:
        for _ in range(100):
            d.proc.send_signal(signal.SIGHUP)
            time.sleep(0.01)
    finally:
        stop.set()
        worker.join(60)
    assert errors == [] and done[0] > 0, errors[:3]
    assert d.proc.poll() is None
    assert d.read_log().count("event=reload ") >= 1 and "reload_refused" not in d.read_log()
    np.testing.assert_allclose(d.client("acme").infer("mlp", {"X": X})["Y"], reference(mlp(1), {"X": X})["Y"],
                               rtol=1e-5, atol=1e-6)


def test_a_tenant_token_on_the_admin_route_is_unauthenticated_and_shows_nothing(served):
    d = served
    with pytest.raises(RtdError) as e:
        d.client("acme").status(d.tokens["acme"])
    assert e.value.code == Code.E_UNAUTHENTICATED and "beta" not in str(e.value)
    with pytest.raises(RtdError) as e:   # another tenant's model name is NOT_FOUND, never named
        d.client("acme").unload("nope")
    assert e.value.code == Code.E_MODEL_NOT_FOUND
    assert [m.name for m in d.client("acme").index()] == ["mlp"]
    beta_serves(d)


@pytest.mark.parametrize("fields, want", [
    ([("authorization", "Bearer \xe9\xff{acme}")], "16"),                          # non-ASCII around a good token
    ([("authorization", "Bearer nope"), ("authorization", "Bearer {acme}")], "16"),  # only the first one counts
    ([("authorization", "Bearer " + "a" * 20000)], None),                            # past the header list limit
    ([(f"x-{i}", "v") for i in range(3000)] + [("authorization", "Bearer {acme}")], None),
])
def test_odd_authorization_headers_are_refused_with_a_code_or_the_connection_closed(served, fields, want):
    import h2.config
    import h2.connection
    import h2.events
    d = served
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(d.socket)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(
        client_side=True, header_encoding="latin-1", validate_outbound_headers=False, normalize_outbound_headers=False))
    conn.initiate_connection()
    fields = [(k, v.replace("{acme}", d.tokens["acme"])) for k, v in fields]
    conn.send_headers(1, [(":method", "POST"), (":scheme", "http"), (":path", f"{SERVICE}/RepositoryIndex"),
                          (":authority", "rtd"), ("content-type", "application/grpc"),
                          *[(k.encode("latin-1"), v.encode("latin-1")) for k, v in fields]])
    conn.send_data(1, b"\0\0\0\0\0", end_stream=True)
    status, closed = None, False
    try:
        sock.sendall(conn.data_to_send())
        sock.settimeout(10)
        while status is None and not closed:
            data = sock.recv(1 << 16)
            closed = not data
            for event in conn.receive_data(data):
                if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                    found = dict(event.headers)
                    status = found.get("grpc-status", status)
                    assert status is None or found.get("grpc-message", "").startswith("E_"), found
                closed |= isinstance(event, h2.events.ConnectionTerminated)
            sock.sendall(conn.data_to_send())
    except (BrokenPipeError, ConnectionResetError):
        closed = True
    finally:
        sock.close()
    assert status == want and (want is not None or closed), (status, closed)
    assert d.proc.poll() is None
    beta_serves(d)
