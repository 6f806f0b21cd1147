"""The worker wire format over a real socketpair: inline and memfd tensors, and refusals of
every malformed frame before any array is built."""
import os
import socket

import numpy as np
import pytest

from rtd.daemon import frames
from rtd.daemon.frames import HEADER, MAGIC, VERSION, Kind
from rtd.errors import Code, RtdError


@pytest.fixture
def pair():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    yield a, b
    a.close(), b.close()


def test_round_trip_inline_and_arena(pair):
    a, b = pair
    arena, peer = frames.Arena(), frames.PeerArena()
    small = np.arange(12, dtype=np.float32).reshape(3, 4)
    big = np.random.default_rng(0).standard_normal((512, 512))  # 2 MiB → arena
    frames.send(a, Kind.INFER, 7, {"key": "m"}, {"small": small, "big": big, "empty": np.zeros((0, 3), np.int64)}, arena=arena)
    got = frames.recv(b, peer)
    assert (got.kind, got.request_id, got.head, got.fds) == (Kind.INFER, 7, {"key": "m"}, [])
    np.testing.assert_array_equal(got.tensors["small"], small)
    np.testing.assert_array_equal(got.tensors["big"], big)
    assert got.tensors["empty"].shape == (0, 3)
    assert not got.tensors["big"].flags.writeable
    first_size = peer.size
    arena.reclaim()
    bigger = np.ones((1024, 1024))                 # 8 MiB: the arena grows, the new fd travels once
    frames.send(a, Kind.INFER, 8, {}, {"x": big, "y": bigger}, arena=arena)
    got = frames.recv(b, peer)
    assert peer.size > first_size
    np.testing.assert_array_equal(got.tensors["x"], big)
    np.testing.assert_array_equal(got.tensors["y"], bigger)
    arena.reclaim()
    frames.send(a, Kind.INFER, 9, {}, {"x": small * 2, "y": bigger * 3}, arena=arena)  # no fd this time
    got = frames.recv(b, peer)
    np.testing.assert_array_equal(got.tensors["y"], bigger * 3)
    arena.close()


def test_leased_regions_are_not_reused_until_released(pair):
    a, b = pair
    arena, peer = frames.Arena(), frames.PeerArena()
    one, two = np.full(1 << 15, 1.0), np.full(1 << 15, 2.0)
    frames.send(a, Kind.OK, 1, {}, {"t": one}, arena=arena)
    first = frames.recv(b, peer, lease=True).tensors["t"]
    part = first[10:20]                       # a view keeps the lease too
    del first
    frames.send(a, Kind.OK, 2, {}, {"t": two}, arena=arena)
    second = frames.recv(b, peer, lease=True).tensors["t"]
    assert peer.released == []                # both still held: the second went elsewhere
    np.testing.assert_array_equal(part, 1.0)
    np.testing.assert_array_equal(second, 2.0)
    del part
    assert len(peer.released) == 1
    arena.release(peer.take_released())
    assert len(arena.lent) == 1
    del second
    arena.release(peer.take_released())
    assert arena.lent == {}
    arena.close()


def test_arena_bounds_are_checked(pair):
    a, b = pair
    arena, peer = frames.Arena(), frames.PeerArena()
    frames.send(a, Kind.OK, 1, {}, {"x": np.ones(1 << 15)}, arena=arena)
    frames.recv(b, peer)
    head = b'{"tensors":[{"name":"x","dtype":"float64","shape":[%d]}]}' % (peer.size // 8 + 1)
    _raw(a, head=head.replace(b'"shape"', b'"at":0,"shape"'))
    with pytest.raises(RtdError, match="outside the peer's arena"):
        frames.recv(b, peer)
    _raw(a, head=b'{"tensors":[{"name":"x","dtype":"uint8","shape":[1],"at":0}]}')
    with pytest.raises(RtdError, match="without an arena"):
        frames.recv(b)
    arena.close()


def _memfd(data: bytes) -> int:
    fd = os.memfd_create("test", os.MFD_CLOEXEC)
    os.write(fd, data)
    return fd


def test_extra_fd_is_handed_to_the_caller(pair):
    a, b = pair
    fd = _memfd(b"model bytes")
    frames.send(a, Kind.LOAD, 1, {"key": "m"}, fds=[fd])
    os.close(fd)
    got = frames.recv(b)
    assert len(got.fds) == 1
    assert bytes(frames.map_fd(got.fds[0], 11)) == b"model bytes"
    os.close(got.fds[0])


def _raw(sock, kind=Kind.OK, nfds=0, head=b"{}", body=b"", magic=MAGIC, version=VERSION):
    sock.sendall(HEADER.pack(magic, version, kind, nfds, 1, len(head), len(body)) + head + body)


@pytest.mark.parametrize("kwargs, message", [
    ({"magic": b"XXXX"}, "magic"),
    ({"version": 9}, "magic or version"),
    ({"kind": 99}, "unknown frame kind"),
    ({"nfds": 2}, "fds"),
    ({"head": b"[1]"}, "not a JSON object"),
    ({"head": b"{nope"}, "not JSON"),
    ({"head": b'{"tensors":[{"name":"x","dtype":"float32","shape":[4]}]}', "body": b"\0" * 8}, "outside the body"),
    ({"head": b'{"tensors":[{"name":"x","dtype":"object","shape":[1]}]}'}, "refused"),
    ({"head": b'{"tensors":[{"name":"x","dtype":"float32","shape":[-1]}]}'}, "bad shape"),
    ({"head": b'{"tensors":[{"name":"x","dtype":["float32"],"shape":[1]}]}'}, "refused"),
    ({"head": b'{"arena_fd":0}'}, "bad arena announcement"),
    ({"head": b'{"tensors":[{"name":"x","dtype":"uint8","shape":[1099511627775,1099511627775]}]}'}, "exceeds the cap"),
])
def test_malformed_frames_are_refused(pair, kwargs, message):
    a, b = pair
    _raw(a, **kwargs)
    with pytest.raises(RtdError) as e:
        frames.recv(b)
    assert e.value.code == Code.E_WORKER_PROTOCOL and message in e.value.detail


def test_oversized_head_refused_before_reading_it(pair):
    a, b = pair
    a.sendall(HEADER.pack(MAGIC, VERSION, Kind.OK, 0, 1, frames.MAX_HEAD + 1, 0))
    with pytest.raises(RtdError, match="longer than the protocol allows"):
        frames.recv(b)


def test_model_fd_shorter_than_claimed_is_refused():
    fd = _memfd(b"abc")
    try:
        with pytest.raises(RtdError, match="memfd holds 3 bytes"):
            frames.map_fd(fd, 100)
    finally:
        os.close(fd)


def test_eof_is_reported(pair):
    a, b = pair
    a.close()
    with pytest.raises(EOFError):
        frames.recv(b)


def test_a_peer_that_sends_ahead_is_a_protocol_error(pair):
    a, b = pair
    frames.send(a, Kind.OK, 1, {})
    frames.send(a, Kind.OK, 2, {})  # peers strictly alternate; a second frame is a violation
    with pytest.raises(RtdError, match="bytes after the end of the frame"):
        frames.recv(b)
