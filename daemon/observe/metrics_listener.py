"""The metrics endpoint: `GET /metrics` over HTTP/1.1, served on the daemon's event loop, on
a Unix socket (no token: its mode and group decide who may read tenants' model names) and/or
a TCP port, where every scrape needs `Authorization: Bearer <metrics or admin token>`
(401 without one). Each listener is bounded like an unauthenticated peer: at most
MAX_CONNECTIONS at once (more are closed at accept), a request must arrive whole within
READ_TIMEOUT_S and MAX_REQUEST bytes, and every answer closes its connection. Any other
path is 404, any other method 405."""
import asyncio
import grp
import os

from rtd.daemon.observe.metrics import CONTENT_TYPE
from rtd.errors import Code, RtdError

MAX_CONNECTIONS = 16
READ_TIMEOUT_S = 5.0
MAX_REQUEST = 8192


def _response(status: str, body: bytes, content_type: str = "text/plain; charset=utf-8", extra: str = "") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n{extra}"
            f"Connection: close\r\n\r\n").encode() + body


def _headers(head: bytes) -> list[tuple[str, str]]:
    """The request's header fields as (lower-case name, value), the form tenants.bearer reads."""
    fields = []
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, sep, value = line.partition(":")
        if sep:
            fields.append((name.strip().lower(), value.strip()))
    return fields


class MetricsListener:
    """`render()` gives the exposition; `authenticate(headers)` raises RtdError for a TCP
    scrape without a good token."""

    def __init__(self, render, authenticate):
        self.render, self.authenticate = render, authenticate
        self.active, self.servers, self.unix_path = 0, [], None

    async def start_tcp(self, address: str, port: int) -> None:
        try:
            self.servers.append(await asyncio.start_server(lambda r, w: self._serve(r, w, True), address, port,
                                                           limit=MAX_REQUEST, backlog=64))
        except OSError as e:
            raise RtdError(Code.E_LISTEN_FAILED, f"metrics {address}:{port}: {e.strerror}; stop what holds it, "
                                                 "or choose another port ([metrics] port, rtd serve --metrics-port; 0: none)") from None

    async def start_unix(self, path: str, mode: int, group: str) -> None:
        try:
            if os.path.exists(path):
                os.unlink(path)   # a stale socket from a previous run
            self.servers.append(await asyncio.start_unix_server(lambda r, w: self._serve(r, w, False), path,
                                                                limit=MAX_REQUEST, backlog=64))
            self.unix_path = path
            if group:
                os.chown(path, -1, grp.getgrnam(group).gr_gid)
            os.chmod(path, mode)
        except KeyError:
            raise RtdError(Code.E_LISTEN_FAILED, f"metrics {path}: no group {group!r}") from None
        except OSError as e:
            raise RtdError(Code.E_LISTEN_FAILED, f"metrics {path}: {e.strerror}") from None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, token_needed: bool) -> None:
        if self.active >= MAX_CONNECTIONS:
            writer.close()
            return
        self.active += 1
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):
                head = await reader.readuntil(b"\r\n\r\n")
                method, path, _ = head.split(b"\r\n", 1)[0].split(b" ", 2)
                if method != b"GET":
                    answer = _response("405 Method Not Allowed", b"GET /metrics only\n")
                elif path.split(b"?", 1)[0] != b"/metrics":
                    answer = _response("404 Not Found", b"GET /metrics only\n")
                else:
                    try:
                        if token_needed:
                            self.authenticate(_headers(head))
                        answer = _response("200 OK", self.render(), CONTENT_TYPE)
                    except RtdError as e:
                        answer = _response("401 Unauthorized", f"{e}\n".encode(), extra="WWW-Authenticate: Bearer\r\n")
                writer.write(answer)
                await writer.drain()
        except (TimeoutError, ValueError, ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass   # too slow, too long, malformed or gone: closed without an answer
        finally:
            self.active -= 1
            writer.close()

    def close(self) -> None:
        for server in self.servers:
            server.close()
        if self.unix_path is not None and os.path.exists(self.unix_path):
            os.unlink(self.unix_path)
