"""The connection table: every listener and every connection of the daemon, whatever protocol
it speaks, under one set of caps, one sweep and one turn order.

Admission: a connection counts against the whole table (kept below the fd limit) and, until
it carries an authenticated call, against its peer (the Unix peer's uid from SO_PEERCRED, or
the TCP address). When either is full, the oldest connection that has not authenticated is
closed to make room for the new one, so peers that never authenticate cannot hold the table;
a connection is refused only when every connection in its way has authenticated. Once it
authenticates it leaves its peer's count: the protocols charge it to each tenant whose calls
it carries (`connections` in the Ledger), so tenants behind one shared peer (a proxy, a mesh
sidecar) each have their own quota.

Turns: calls that must wait start one per payer per turn of the event loop, round-robin, so
one tenant's backlog never sits ahead of another tenant's call.
"""
import asyncio
import collections
import socket
import ssl
import struct
import time

from rtd.daemon.transport.contract import Connection, TransportLimits

OPERATOR_UID = 0


def unix_peer(sock: socket.socket) -> str:
    pid, uid, gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return f"uid:{uid}"


def tcp_peer(sock: socket.socket) -> str:
    return f"ip:{sock.getpeername()[0]}"


class ConnectionTable:
    """`make(table, peer_of)` builds one protocol's connection (an asyncio.Protocol keeping
    the Connection contract), which calls `admit` when made and `forget` when lost."""

    def __init__(self, limits: TransportLimits, ledger):
        self.limits, self.ledger = limits, ledger
        self.connections: dict[Connection, None] = {}     # in admission order (oldest first)
        self.by_peer: collections.Counter = collections.Counter()   # unauthenticated connections per peer
        self.listeners: list = []
        self.refused = collections.Counter()      # why connections were refused or closed at accept
        self.turns: dict[str, collections.deque] = {}   # payer -> starts waiting their turn
        self.turning = False
        self.sweeper = None

    # -- admission -----------------------------------------------------------------------------
    def admit(self, conn: Connection) -> bool:
        """Take `conn` in, closing the oldest unauthenticated connection in its way when its
        peer or the table is full; False when it cannot be taken."""
        operator = conn.peer == f"uid:{OPERATOR_UID}"
        room = self.limits.max_connections + (self.limits.max_connections // 8 if operator else 0)
        if len(self.connections) >= room and not self._make_room(None):
            self.refused["connections"] += 1
            return False
        if self.by_peer[conn.peer] >= self.limits.max_connections_per_peer and not self._make_room(conn.peer):
            self.refused["connections_per_peer"] += 1
            return False
        conn.opened = time.monotonic()
        self.connections[conn] = None
        self.by_peer[conn.peer] += 1
        return True

    def _make_room(self, peer: str | None) -> bool:
        """Close the oldest connection (of `peer`, or of anyone) that has not authenticated."""
        victim = next((c for c in self.connections if not c.authenticated and (peer is None or c.peer == peer)), None)
        if victim is None:
            return False
        self.refused["unauthenticated_closed"] += 1
        self.forget(victim)
        victim.close()
        return True

    def authenticated(self, conn: Connection) -> None:
        """`conn` carried its first authenticated call (it sets `conn.authenticated` after this)."""
        if conn in self.connections and not conn.authenticated:
            self._uncount(conn.peer)

    def forget(self, conn: Connection) -> None:
        if conn in self.connections:
            del self.connections[conn]
            if not conn.authenticated:
                self._uncount(conn.peer)

    def _uncount(self, peer: str) -> None:
        self.by_peer[peer] -= 1
        if self.by_peer[peer] <= 0:
            del self.by_peer[peer]

    # -- turns ---------------------------------------------------------------------------------
    def take_turn(self, who: str, loop: asyncio.AbstractEventLoop, start) -> None:
        """Call `start()` now if no call waits for its turn; else queue it behind `who`'s own.
        `loop` is the caller's (the running one: asking asyncio for it costs a system call)."""
        if not self.turns:
            start()
            self.turns.setdefault(who, collections.deque())   # later arrivals this turn queue
        else:
            self.turns.setdefault(who, collections.deque()).append(start)
        if not self.turning:
            self.turning = True
            loop.call_soon(self._next_turn, loop)

    def _next_turn(self, loop: asyncio.AbstractEventLoop) -> None:
        self.turning = False
        for who in list(self.turns):
            waiting = self.turns[who]
            if waiting:
                waiting.popleft()()
            if not waiting:
                del self.turns[who]
        if self.turns:
            self.turning = True
            loop.call_soon(self._next_turn, loop)

    # -- listeners -----------------------------------------------------------------------------
    async def listen_unix(self, path: str, make) -> None:
        loop = asyncio.get_running_loop()
        self.listeners.append(await loop.create_unix_server(lambda: make(self, unix_peer), path, backlog=1024))
        self._start_sweeper()

    async def listen_tcp(self, host: str, port: int, context: ssl.SSLContext | None, make) -> None:
        """TCP with mTLS, or plaintext (context None) behind a mesh that terminates it."""
        loop = asyncio.get_running_loop()
        self.listeners.append(await loop.create_server(
            lambda: make(self, tcp_peer), host, port, ssl=context,
            ssl_handshake_timeout=self.limits.auth_timeout_s if context else None, backlog=1024))
        self._start_sweeper()

    def _start_sweeper(self) -> None:
        if self.sweeper is None:
            self.sweeper = asyncio.get_running_loop().create_task(self._sweep())

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            now = time.monotonic()
            for conn in list(self.connections):
                conn.sweep(now)

    def stop_accepting(self) -> None:
        for listener in self.listeners:
            listener.close()
        for conn in list(self.connections):   # no new calls; those in flight finish
            conn.goaway()

    def busy(self) -> bool:
        """Calls in hand, or answers not yet all handed to the kernel (a stream is done when its last
        byte reaches the transport, which may still hold megabytes for a slow reader)."""
        return any(conn.busy() or (conn.transport is not None and conn.transport.get_write_buffer_size() > 0)
                   for conn in self.connections)

    def close(self) -> None:
        if self.sweeper is not None:
            self.sweeper.cancel()
        for conn in list(self.connections):
            conn.close()


def tls_context(cert: str, key: str, client_ca: str, alpn: str = "h2") -> ssl.SSLContext:
    """mTLS for a TCP listener: clients must present a certificate from `client_ca`."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=client_ca)
    context.load_cert_chain(cert, key)
    context.verify_mode = ssl.CERT_REQUIRED
    context.set_alpn_protocols([alpn])
    return context
