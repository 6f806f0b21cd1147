"""The metrics endpoint: `GET /metrics` over HTTP/1.1 on a loopback port, served on the
daemon's event loop. It takes no token, so it is bounded like an unauthenticated peer: at
most MAX_CONNECTIONS at once (more are closed at accept), a request must arrive whole within
READ_TIMEOUT_S and MAX_REQUEST bytes, and every answer closes its connection. Any other path
or method is 404/405."""
import asyncio

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from rtd.errors import Code, RtdError

MAX_CONNECTIONS = 16
READ_TIMEOUT_S = 5.0
MAX_REQUEST = 8192


def _response(status: str, body: bytes, content_type: str = "text/plain; charset=utf-8") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n").encode() + body


class MetricsListener:
    def __init__(self, registry):
        self.registry, self.active, self.server = registry, 0, None

    async def start(self, address: str, port: int) -> None:
        try:
            self.server = await asyncio.start_server(self._serve, address, port, limit=MAX_REQUEST, backlog=64)
        except OSError as e:
            raise RtdError(Code.E_LISTEN_FAILED, f"metrics {address}:{port}: {e.strerror}; stop what holds it, "
                                                 "or choose another port ([metrics] port, rtd serve --metrics-port; 0: none)") from None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
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
                    answer = _response("200 OK", generate_latest(self.registry), CONTENT_TYPE_LATEST)
                writer.write(answer)
                await writer.drain()
        except (TimeoutError, ValueError, ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass   # too slow, too long, malformed or gone: closed without an answer
        finally:
            self.active -= 1
            writer.close()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
