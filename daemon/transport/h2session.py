"""One connection's HTTP/2 session in C (h2session.c over libnghttp2, built at install time by
cffi): HPACK, framing, flow control and the frame budget happen there, rtd's policies in
grpc_h2.py. A read from the socket is one call in (`feed`), whatever number of frames it
holds; what comes back is a list of events, and `write` moves what is due to the transport,
large response slices as views of the reply's own parts (the transport's one copy to the
socket is the only one). A large request's body goes from the read straight into its file
(`sink`), written by C as it arrives.
"""
import struct

from rtd.daemon.transport._h2session import ffi, lib
from rtd.daemon.transport.contract import MAX_HEADER_LIST, WRITE_HIGH_WATER, TransportLimits

HEADERS, DATA, END, CLOSED, GOAWAY, SUNK = (lib.RTD_H2_HEADERS, lib.RTD_H2_DATA, lib.RTD_H2_END, lib.RTD_H2_CLOSED,
                                            lib.RTD_H2_GOAWAY, lib.RTD_H2_SUNK)
ABUSE, HEADER_LIST, NOMEM = lib.RTD_H2_ABUSE, lib.RTD_H2_HEADER_LIST, lib.RTD_H2_NOMEM
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, CANCEL, ENHANCE_YOUR_CALM = 0x0, 0x1, 0x2, 0x8, 0xb   # RFC 9113 error codes
MORE, OVER = 1, 2                # rtd_h2_pump: more waits to be written; the session is over

FRAME_SIZE = 1 << 16             # the largest frame a client may send
OPEN_WINDOW = 1 << 16            # what a stream may send before its body is charged
BODY_WINDOW = 1 << 20            # a stream's window once it is
CONNECTION_WINDOW = 1 << 24
HPACK_TABLE = 4096               # the most response-header table a client may make the daemon keep (the RFC's default)
# The frame budget: every frame a client sends costs one (DATA earns one back per 4 KiB, decoded
# headers cost one per KiB more); a call answered earns CALL_CREDIT, a refused one costs
# REFUSAL_COST more. It holds FRAME_ALLOWANCE (at least 8 per stream the connection may open)
# and refills that much per second, far above what grpcio or tritonclient spend (a few frames
# per call, all earned back); past it the connection gets GOAWAY(ENHANCE_YOUR_CALM).
FRAME_ALLOWANCE, CALL_CREDIT, REFUSAL_COST = 1024, 8, 4
EVENT = struct.Struct("=4I")                 # kind, stream id, a, b
REF = struct.Struct("=QIIQQ")                # rtd_h2_ref: at, stream id, part, offset, length
assert REF.size == ffi.sizeof("rtd_h2_ref")


class Session:
    """`views_of(sid)` returns the parts a stream's response was given as (the memoryviews
    passed to `respond`): large slices of them are written in place."""

    def __init__(self, limits: TransportLimits, views_of):
        allowance = max(FRAME_ALLOWANCE, 8 * limits.max_streams_per_connection)
        settings = ffi.new("rtd_h2_limits *", (limits.max_streams_per_connection, MAX_HEADER_LIST, FRAME_SIZE, OPEN_WINDOW,
                                               CONNECTION_WINDOW, HPACK_TABLE, allowance, allowance))
        h = lib.rtd_h2_new(settings)
        if h == ffi.NULL:
            raise MemoryError("no HTTP/2 session")
        self.h = ffi.gc(h, lib.rtd_h2_free)
        self.views_of = views_of

    def feed(self, data: bytes) -> tuple[int, list, object]:
        """Read the client's bytes: (status, events as (kind, sid, a, b) tuples, the stash the
        events' bytes are in). A non-zero status ends the connection."""
        h = self.h
        status = lib.rtd_h2_feed(h, data, len(data))
        if not h.nevents:
            return status, (), None
        # a copy: a write while they are handled may reuse the C buffer (the stash is only refilled by feed)
        return status, list(EVENT.iter_unpack(ffi.buffer(h.events, h.nevents * EVENT.size))), ffi.buffer(h.stash, h.nstash)

    def write(self, transport) -> tuple[int, list]:
        """Hand the transport up to about WRITE_HIGH_WATER bytes: (MORE, OVER, 0 or a negative
        error, the events writing caused — streams closed once their last byte was handed over)."""
        h = self.h
        status = lib.rtd_h2_pump(h, WRITE_HIGH_WATER)
        if h.nrefs:
            transport.writelines(self._pieces())
        elif h.nout:
            transport.write(ffi.buffer(h.out, h.nout)[:])
        return status, list(EVENT.iter_unpack(ffi.buffer(h.events, h.nevents * EVENT.size))) if h.nevents else ()

    def _pieces(self) -> list:
        h = self.h
        out, pieces, at = ffi.buffer(h.out, h.nout), [], 0
        for ref_at, sid, part, offset, length in REF.iter_unpack(ffi.buffer(h.refs, h.nrefs * REF.size)):
            if ref_at > at:
                pieces.append(out[at:ref_at])
            pieces.append(self.views_of(sid)[part][offset:offset + length])
            at = ref_at
        if at < h.nout:
            pieces.append(out[at:h.nout])
        return pieces

    def respond(self, sid: int, views: list) -> bool:
        """Answer with the message made of `views` (kept alive by the caller until the stream
        closes or is reset); False when the stream is gone."""
        return lib.rtd_h2_respond(self.h, sid, [ffi.from_buffer(v) for v in views], [v.nbytes for v in views], len(views)) == 0

    def refuse(self, sid: int, grpc_status: int, message: str) -> None:
        text = message.encode()
        lib.rtd_h2_refuse(self.h, sid, grpc_status, text, len(text))

    def reset(self, sid: int, code: int) -> None:
        lib.rtd_h2_reset(self.h, sid, code)

    def sink(self, sid: int, fd: int, at: int, end: int) -> None:
        """Write the stream's body bytes to `fd` from offset `at` up to `end` in C as they arrive
        (SUNK events say how many); fd -1 stops it. The caller keeps fd open meanwhile."""
        if lib.rtd_h2_sink(self.h, sid, fd, at, end) != 0:
            raise MemoryError("no room for a sink")

    def consume(self, sid: int, length: int, stream: bool) -> None:
        lib.rtd_h2_consume(self.h, sid, length, stream)

    def open_window(self, sid: int) -> None:
        lib.rtd_h2_open_window(self.h, sid, BODY_WINDOW)

    def goaway(self, code: int, why: str) -> None:
        text = why.encode()[:200]
        lib.rtd_h2_goaway(self.h, code, text, len(text))

    def sent(self, sid: int) -> int:
        return lib.rtd_h2_sent(self.h, sid)

    def charge(self, frames: float) -> bool:
        """Spend (or, negative, earn) frames of the budget; False once it is spent."""
        self.h.allowance -= frames
        return self.h.allowance >= 0

    def close(self) -> None:
        ffi.release(self.h)
