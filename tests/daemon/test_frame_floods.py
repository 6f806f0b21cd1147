"""Floods of every HTTP/2 frame kind against a real `rtd serve` (tenants acme and beta), from a
connection of acme's that carried an authenticated call and from one that never does: every
frame costs from the connection's frame budget (daemon/transport/h2session.py), so the
flooding connection gets GOAWAY(ENHANCE_YOUR_CALM) and is closed after a bounded number of
frames, while beta's calls keep succeeding with the right results and the supervisor's memory
and CPU stay put. And the per-peer connection cap, held by connections that never
authenticate, still lets another tenant's calls through (the table closes the oldest
unauthenticated connection to admit a new one).

Was (issue 17): empty DATA, WINDOW_UPDATE(1) and PRIORITY floods raised beta's p99 up to
751 ms and the connection was never closed; 2 of 20 calls of a tenant sharing its peer with
idle connections got through."""
import os
import socket
import struct
import time

import numpy as np
import pytest

from rtd.cli.client import Client
from tests.daemon.conftest import mlp
from tests.daemon.test_attacks import CONTINUATION, DATA, END_HEADERS, END_STREAM, HEADERS, PREFACE, SERVICE, SETTINGS, \
    FrameReader, beta_serves, frame, raw_connect, request_block
from tests.daemon.test_budgets import Calm, X, rss
from tests.daemon.idle_flood import still_open
from tests.daemon.test_serving import reference

PRIORITY, RST_STREAM, PING, WINDOW_UPDATE, UNKNOWN = 0x2, 0x3, 0x6, 0x8, 0xFA
ENHANCE_YOUR_CALM, CANCEL = 0xB, 0x8
FLOOD_FRAMES = 300_000   # a daemon that never closes the connection takes them all
BATCH = 1000


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def batch(kind: str, token: str | None, first_sid: int) -> tuple[bytes, int]:
    """BATCH frames of one kind (and the next stream id free): each on the stream that
    `opening` left open (sid 3), or, for RST_STREAM, a new stream opened and reset at once
    (the rapid-reset attack)."""
    if kind == "RST_STREAM":
        block, frames = request_block(f"{SERVICE}/ModelInfer", token), []
        for sid in range(first_sid, first_sid + BATCH, 2):
            frames += [frame(HEADERS, END_HEADERS, sid, block), frame(RST_STREAM, 0, sid, struct.pack(">I", CANCEL))]
        return b"".join(frames), first_sid + BATCH
    one = {"empty DATA": frame(DATA, 0, 3, b""),
           "WINDOW_UPDATE(1)": frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 1)),
           "PRIORITY": frame(PRIORITY, 0, 3, struct.pack(">IB", 0, 15)),
           "PING": frame(PING, 0, 0, b"\0" * 8),
           "SETTINGS": frame(SETTINGS, 0, 0, b""),
           "CONTINUATION": frame(CONTINUATION, 0, 3, b""),
           "unknown type": frame(UNKNOWN, 0, 0, b"rtd-test")}[kind]
    return one * BATCH, first_sid


def opening(kind: str, token: str | None) -> bytes:
    """What comes before the flood: stream 3 opened (a call whose body never comes) for the
    kinds that flood a stream, its header block left open for CONTINUATION."""
    block = request_block(f"{SERVICE}/ModelInfer", token)
    if kind == "CONTINUATION":
        return frame(HEADERS, 0, 3, block)
    if kind in ("empty DATA", "PRIORITY"):
        return frame(HEADERS, END_HEADERS, 3, block)
    return b""


@pytest.fixture(scope="module")
def served(daemon):
    daemon.client("acme").load("mlp", daemon.package("acme", mlp(1), "mlp"))
    daemon.client("beta").load("mlp", daemon.package("beta", mlp(2), "mlp"))
    return daemon


KINDS = ["empty DATA", "WINDOW_UPDATE(1)", "PRIORITY", "RST_STREAM", "PING", "SETTINGS", "CONTINUATION", "unknown type"]


@pytest.mark.parametrize("authenticated", [True, False], ids=["tenant", "unauthenticated"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_frame_flood_gets_goaway_and_the_other_tenant_is_served(served, kind, authenticated):
    d = served
    pid = d.proc.pid
    beta_serves(d)
    token = d.tokens["acme"] if authenticated else None
    sock = raw_connect(d.socket)
    reader = FrameReader(sock)
    sent, sid = 0, 5
    with Calm(d) as calm:
        if authenticated:   # a call answered first: the connection is the tenant's
            sock.sendall(frame(HEADERS, END_HEADERS, 1, request_block(f"{SERVICE}/RepositoryIndex", token)) +
                         frame(DATA, END_STREAM, 1, b"\0\0\0\0\0"))
            reader.wait_for(1)
        base, cpu = rss(pid), cpu_seconds(pid)
        try:
            sock.sendall(opening(kind, token))
            while sent < FLOOD_FRAMES:
                data, sid = batch(kind, token, sid)
                sock.sendall(data)
                sent += BATCH
        except OSError:   # the daemon closed the connection
            pass
        reader.join(30)
        cpu, grown = cpu_seconds(pid) - cpu, rss(pid) - base
        while calm.done < 20:   # beta's calls go on, and are right (Calm checks every answer)
            time.sleep(0.05)
    sock.close()
    print(f"{kind}: {sent} frames sent before the daemon closed the connection, supervisor CPU {cpu:.3f} s")
    assert reader.closed, f"a {kind} flood of {sent} frames: the connection is still open"
    assert ENHANCE_YOUR_CALM in reader.goaway_codes, f"{kind}: GOAWAY codes {reader.goaway_codes} ({reader.goaways})"
    assert sent < FLOOD_FRAMES, f"the daemon took all {sent} frames of a {kind} flood"
    assert grown < 16 << 20, f"a {kind} flood grew the supervisor by {grown >> 20} MiB"
    assert cpu < 2.0, f"a {kind} flood of {sent} frames cost the supervisor {cpu:.2f} s of CPU"
    beta_serves(d)


def test_legitimate_clients_many_calls_on_one_connection_stay_within_the_budget(served):
    """tritonclient (grpcio) on one channel: many calls, outputs over several DATA frames, so
    the client's WINDOW_UPDATEs and BDP pings come too — never a GOAWAY."""
    d = served
    dropped = d.read_log().count("closing an HTTP/2 connection")
    client = d.client("beta")
    want = reference(mlp(2), {"X": X})["Y"]
    big = np.tile(X, (6000, 1))   # a 96 KB request, a 72 KB response
    for i in range(1500):
        x = big if i % 10 == 0 else X
        np.testing.assert_allclose(client.infer("mlp", {"X": x}, timeout=30)["Y"][:2], want, rtol=1e-5, atol=1e-6)
    assert d.read_log().count("closing an HTTP/2 connection") == dropped


def idle_connection(path: str) -> socket.socket:
    """A connection that sends the preface and nothing more (non-blocking, for still_open)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    sock.sendall(PREFACE + frame(SETTINGS, 0, 0, b""))
    sock.setblocking(False)
    return sock


def test_connections_that_never_authenticate_cannot_hold_the_per_peer_cap(fresh_daemon):
    d = fresh_daemon(limits=dict(max_connections_per_peer=20, connection_auth_timeout_s=120.0))
    d.client("beta").load("mlp", d.package("beta", mlp(2), "mlp"))
    want = reference(mlp(2), {"X": X})["Y"]
    idle = [idle_connection(d.socket) for _ in range(20)]   # this uid's whole cap
    answers = []
    for _ in range(20):   # each on a connection of its own, from the same uid, with the cap full again
        client = Client(d.url(), d.tokens["beta"], options=[("grpc.use_local_subchannel_pool", 1)])
        answers.append(client.infer("mlp", {"X": X}, timeout=30)["Y"])
        client.close()
        idle.append(idle_connection(d.socket))
    for got in answers:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    time.sleep(0.5)
    open_now = [still_open(sock) for sock in idle]
    for sock in idle:
        sock.close()
    assert open_now == [False] * 20 + [True] * 20, "the oldest idle connection is closed for each call's connection"
