"""rtd.wire.Reader over a real socketpair, fed hostile streams (frames.py).

Property: reading yields Frames, then ends in EOFError (the writer closed), BlockingIOError
(a non-blocking reader has read everything) or RtdError(E_WORKER_PROTOCOL); nothing else
escapes. Every array of a Frame lies inside the bytes of its frame or of the peer's arena
(checked by address) and can be read whole; BYTES arrays hold bytes; no fd is left open once
the frames' fds are closed and the Reader is closed. The tests at the end guard bugs the
fuzzer found.
"""
import json
import os
import socket
import tracemalloc

import numpy as np
from hypothesis import strategies as st

from rtd import wire
from rtd.errors import Code, RtdError
from rtd.wire import HEADER, MAGIC, VERSION, Kind

from . import frames
from .harness import assert_no_fd_leak, assert_refusal, open_fds, run

readers = st.fixed_dictionaries({
    "peer": st.booleans(), "lease": st.booleans(),
    "max_head": st.sampled_from([wire.MAX_HEAD, 1 << 10, 64]),
    "max_body": st.sampled_from([wire.MAX_BODY, 2 * wire.MAX_INLINE_BODY, 0, 64]),
})


def read_all(sock: socket.socket, reader: wire.Reader, eof: bool) -> list:
    """Frames until the stream ends; the exception that ended it is returned last."""
    got = []
    try:
        if eof:   # blocking reads until EOF (or a refusal)
            while True:
                got.append(reader.recv())
        else:     # the supervisor's way: non-blocking reads until the socket is empty
            sock.setblocking(False)
            while True:
                while (frame := reader.next()) is not None:
                    got.append(frame)
                reader.pump()
    except (EOFError, BlockingIOError, RtdError) as e:
        got.append(e.with_traceback(None))   # no cycle through this frame: the fds go without a collection
    except Exception as e:   # the property is about what may escape
        got.append(e)
    return got


def check_stream(case) -> None:
    stream, options = case
    before = open_fds()
    a, b = frames.socketpair()
    got = received = end = frame = None
    peer = wire.PeerArena() if options["peer"] else None
    # lease=True without a peer arena is no configuration any caller uses (it fails on "arena")
    reader = wire.Reader(b, peer, options["lease"] and peer is not None, options["max_head"], options["max_body"])
    try:
        frames.send(a, stream)
        if stream.eof:
            a.close()
        with frames.bounded_address_space():
            got = read_all(b, reader, stream.eof)
        *received, end = got
        for frame in received:
            try:
                frames.check_frame(frame)
            finally:
                for fd in frame.fds:
                    os.close(fd)
        if isinstance(end, EOFError):
            assert stream.eof
        elif isinstance(end, BlockingIOError):
            assert not stream.eof
        else:
            assert_refusal(end, Code.E_WORKER_PROTOCOL)
    finally:
        reader.close()
        a.close(), b.close()
        del reader, peer, got, received, end, frame   # a traceback or view would keep the peer's mapping (and its fd)
    assert_no_fd_leak(before)


def test_reader_refuses_hostile_streams_with_e_codes():
    run(st.tuples(frames.streams(), readers), check_stream, default=300)


def test_reader_reads_every_honest_frame():
    """Unmutated frames from wire.encode: all of them arrive, each as sent."""
    def check(case):
        tensors_list = case
        before = open_fds()
        a, b = frames.socketpair()
        arena, peer = wire.Arena(), wire.PeerArena()
        try:
            for i, tensors in enumerate(tensors_list):
                wire.send(a, Kind.OK, i, {"i": i}, tensors, arena=arena)
            a.close()
            reader = wire.Reader(b, peer)
            for i, tensors in enumerate(tensors_list):
                frame = reader.recv()
                frames.check_frame(frame)
                assert (frame.request_id, frame.head) == (i, {"i": i})
                assert set(frame.tensors) == set(tensors)
                for name, value in tensors.items():
                    assert frame.tensors[name].shape == value.shape
                    np.testing.assert_array_equal(frame.tensors[name], value)
            try:
                reader.recv()
                raise AssertionError("a frame after the last one sent")
            except EOFError:
                pass
            reader.close()
        finally:
            arena.close()
            a.close(), b.close()
        del peer, reader, frame
        assert_no_fd_leak(before)
    big = st.builds(lambda n: np.arange(n, dtype=np.float32), st.integers(wire.INLINE_LIMIT // 4, wire.INLINE_LIMIT // 4 + 64))
    tensors = st.dictionaries(frames.names, st.one_of(frames.arrays(), big), max_size=3)
    run(st.lists(tensors, min_size=1, max_size=4), check, default=100)


# -- regressions: bugs the fuzzer found ------------------------------------------------------------
def _send_head(sock: socket.socket, head: dict, body: bytes = b"", fds=()) -> None:
    data = json.dumps(head).encode()
    frame = HEADER.pack(MAGIC, VERSION, Kind.OK, len(fds), 1, len(data), len(body)) + data + body
    sock.sendmsg([frame], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, bytes(np.array(fds, np.int32)))] if fds else [])


def _outcome(head: dict, fds=(), peer=None) -> BaseException | wire.Frame:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        _send_head(a, head, fds=fds)
        reader = wire.Reader(b, peer, max_body=0)
        try:
            return reader.recv()
        except Exception as e:
            return e
        finally:
            reader.close()
    finally:
        a.close(), b.close()


def test_an_empty_tensor_with_overflowing_dims_is_e_worker_protocol():
    """Was: rtd/wire.py `_tensors` let shape [0, 2^39, 2^39] through (0 elements, each dim <
    2^40), then `flat.reshape(shape)` raised ValueError ("array is too big"), not
    E_WORKER_PROTOCOL (and WorkerChannel did not catch it)."""
    head = {"tensors": [{"name": "x", "dtype": "float32", "shape": [0, 2**39, 2**39], "offset": 0}]}
    assert_refusal(_outcome(head), Code.E_WORKER_PROTOCOL)


def test_a_bytes_tensor_count_is_checked_against_its_bytes_before_allocating():
    """Was: rtd/dtypes.py `decode_bytes` (from rtd/wire.py `_tensors`) allocated
    np.empty(count, object) before looking at the bytes: a ~90-byte head claiming 2^22 BYTES
    elements cost 32 MiB, 2^39 * 2^39 raised MemoryError instead of E_WORKER_PROTOCOL."""
    head = {"tensors": [{"name": "x", "dtype": "bytes", "shape": [1 << 22], "offset": 0, "nbytes": 0}]}
    tracemalloc.start()
    try:
        outcome = _outcome(head)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert_refusal(outcome, Code.E_WORKER_PROTOCOL)
    assert peak < 1 << 20, f"decoding a {len(json.dumps(head))}-byte head allocated {peak} bytes"
    huge = {"tensors": [{"name": "x", "dtype": "bytes", "shape": [2**39, 2**39], "offset": 0, "nbytes": 0}]}
    assert_refusal(_outcome(huge), Code.E_WORKER_PROTOCOL)


def test_a_write_only_arena_fd_is_e_worker_protocol():
    """Was: rtd/wire.py `PeerArena.replace` passed a sealed but write-only arena fd to
    mmap(PROT_READ), whose PermissionError escaped the Reader (WorkerChannel called it
    E_WORKER_CRASHED, not E_WORKER_PROTOCOL)."""
    fd = frames.make_fd("wronly")
    try:
        outcome = _outcome({"arena_fd": 0}, fds=[fd], peer=wire.PeerArena())
    finally:
        os.close(fd)
    assert_refusal(outcome, Code.E_WORKER_PROTOCOL)

