"""The one wire format over real socketpairs: inline and arena tensors, pipelined frames with
their fds, BYTES and 0-d tensors, and refusals of every malformed frame before any array
is built."""
import os
import socket

import numpy as np
import pytest

from rtd import wire as frames
from rtd.wire import HEADER, MAGIC, VERSION, Kind
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
    got = frames.Reader(b, peer).recv()
    assert (got.kind, got.request_id, got.head, got.fds) == (Kind.INFER, 7, {"key": "m"}, [])
    np.testing.assert_array_equal(got.tensors["small"], small)
    np.testing.assert_array_equal(got.tensors["big"], big)
    assert got.tensors["empty"].shape == (0, 3)
    assert not got.tensors["big"].flags.writeable
    first_size = peer.size
    arena.lent.clear()
    bigger = np.ones((1024, 1024))                 # 8 MiB: the arena grows, the new fd travels once
    frames.send(a, Kind.INFER, 8, {}, {"x": big, "y": bigger}, arena=arena)
    got = frames.Reader(b, peer).recv()
    assert peer.size > first_size
    np.testing.assert_array_equal(got.tensors["x"], big)
    np.testing.assert_array_equal(got.tensors["y"], bigger)
    arena.lent.clear()
    frames.send(a, Kind.INFER, 9, {}, {"x": small * 2, "y": bigger * 3}, arena=arena)  # no fd this time
    got = frames.Reader(b, peer).recv()
    np.testing.assert_array_equal(got.tensors["y"], bigger * 3)
    arena.close()


def test_leased_regions_are_not_reused_until_released(pair):
    a, b = pair
    arena, peer = frames.Arena(), frames.PeerArena()
    one, two = np.full(1 << 15, 1.0), np.full(1 << 15, 2.0)
    frames.send(a, Kind.OK, 1, {}, {"t": one}, arena=arena)
    first = frames.Reader(b, peer, lease=True).recv().tensors["t"]
    part = first[10:20]                       # a view keeps the lease too
    del first
    frames.send(a, Kind.OK, 2, {}, {"t": two}, arena=arena)
    second = frames.Reader(b, peer, lease=True).recv().tensors["t"]
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
    frames.Reader(b, peer).recv()
    head = b'{"tensors":[{"name":"x","dtype":"float64","shape":[%d]}]}' % (peer.size // 8 + 1)
    _raw(a, head=head.replace(b'"shape"', b'"at":0,"shape"'))
    with pytest.raises(RtdError, match="outside the peer's arena"):
        frames.Reader(b, peer).recv()
    _raw(a, head=b'{"tensors":[{"name":"x","dtype":"uint8","shape":[1],"at":0}]}')
    with pytest.raises(RtdError, match="without an arena"):
        frames.Reader(b).recv()
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
    got = frames.Reader(b).recv()
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
    ({"head": b'{"a":"\xff"}'}, "not JSON"),                 # invalid UTF-8
    ({"head": b'{"a":' + b"[" * 2000 + b"]" * 2000 + b"}"}, "not JSON"),   # nested past the parser's depth
    ({"head": b'{"a":NaN}'}, "not JSON"),
    ({"head": b'{"tensors":[{"name":"x","dtype":"float32","shape":[4]}]}', "body": b"\0" * 8}, "outside the body"),
    ({"head": b'{"tensors":[{"name":"x","dtype":"object","shape":[1]}]}'}, "refused"),
    ({"head": b'{"tensors":[{"name":"x","dtype":"float32","shape":[-1]}]}'}, "bad shape"),
    ({"head": b'{"tensors":[{"name":"x","dtype":["float32"],"shape":[1]}]}'}, "refused"),
    ({"head": b'{"arena_fd":0}'}, "bad arena announcement"),
    ({"head": b'{"tensors":[{"name":"x","dtype":"float64","shape":[1048576,1048576]}]}'}, "exceeds the cap"),
    ({"head": b'{"tensors":[{"name":"x","dtype":"uint8","shape":[0,1099511627775,1099511627775]}]}'}, "bad shape"),
])
def test_malformed_frames_are_refused(pair, kwargs, message):
    a, b = pair
    _raw(a, **kwargs)
    with pytest.raises(RtdError) as e:
        frames.Reader(b).recv()
    assert e.value.code == Code.E_WORKER_PROTOCOL and message in e.value.detail


def test_a_head_int_past_64_bits_is_written_and_read_as_a_float(pair):
    """orjson writes 64-bit ints; a larger one (a hostile peer's, or the fuzzer's) is written by json
    and read back as a float, which every int field of a head refuses."""
    a, b = pair
    frames.send(a, Kind.OK, 1, {"key": -(2**63) - 1, "rows": 2**70})
    got = frames.Reader(b).recv()
    assert got.head == {"key": float(-(2**63) - 1), "rows": float(2**70)}
    assert type(got.head["rows"]) is float


def test_oversized_head_refused_before_reading_it(pair):
    a, b = pair
    a.sendall(HEADER.pack(MAGIC, VERSION, Kind.OK, 0, 1, frames.MAX_HEAD + 1, 0))
    with pytest.raises(RtdError, match="beyond what the channel allows"):
        frames.Reader(b).recv()


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
        frames.Reader(b).recv()


def test_pipelined_frames_each_get_their_own_fds(pair):
    a, b = pair
    arena = frames.Arena()
    fds = [_memfd(b"first"), _memfd(b"second")]
    frames.send(a, Kind.INFER, 1, {}, {"x": np.ones(1 << 15)}, arena=arena)   # carries the arena fd
    frames.send(a, Kind.INFER, 2, {}, {"x": np.zeros(3)})                     # no fd
    frames.send(a, Kind.LOAD, 3, {}, fds=[fds[0]])
    frames.send(a, Kind.LOAD, 4, {}, fds=[fds[1]])
    frames.send(a, Kind.PING, 5)
    for fd in fds:
        os.close(fd)
    reader = frames.Reader(b, frames.PeerArena())
    got = [reader.recv() for _ in range(5)]
    assert [f.request_id for f in got] == [1, 2, 3, 4, 5]
    assert [len(f.fds) for f in got] == [0, 0, 1, 1, 0]
    assert bytes(frames.map_fd(got[2].fds[0], 5)) == b"first" and bytes(frames.map_fd(got[3].fds[0], 6)) == b"second"
    np.testing.assert_array_equal(got[0].tensors["x"], 1.0)
    for f in got:
        for fd in f.fds:
            os.close(fd)
    arena.close()


def test_a_frame_whose_fds_went_missing_or_stray_is_refused(pair):
    a, b = pair
    fd = _memfd(b"x")
    frames.send(a, Kind.PING, 1, fds=[fd])
    _raw(a, kind=Kind.PING)
    raw = HEADER.pack(MAGIC, VERSION, Kind.PING, 0, 2, 2, 0) + b"{}"
    a.sendmsg([raw], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, frames.array.array("i", [fd]))])  # fds the header denies
    os.close(fd)
    reader = frames.Reader(b)
    assert len(reader.recv().fds) == 1
    reader.recv()
    with pytest.raises(RtdError, match="fds"):
        reader.recv()


def test_bytes_and_zero_d_tensors_cross_as_they_are(pair):
    a, b = pair
    arena = frames.Arena()
    words = np.array([[b"alpha", b""], ["\u00e9t\u00e9", b"\x00\xff"]], dtype=object)
    big_words = np.array([b"w" * 1000] * 100, dtype=object)                   # 100 KB: through the arena
    frames.send(a, Kind.OK, 1, {}, {"s": np.float32(2.5), "w": words, "bw": big_words, "e": np.zeros((0,), np.int8)},
                arena=arena)
    got = frames.Reader(b, frames.PeerArena()).recv().tensors
    assert got["s"].shape == () and got["s"] == np.float32(2.5)
    assert got["w"].shape == (2, 2) and got["w"][1, 0] == "\u00e9t\u00e9".encode() and got["w"][1, 1] == b"\x00\xff"
    assert list(got["bw"]) == list(big_words) and got["e"].shape == (0,)
    arena.close()


def test_malformed_bytes_tensors_are_refused(pair):
    a, b = pair
    head = b'{"tensors":[{"name":"w","dtype":"bytes","shape":[2],"nbytes":9,"offset":0}]}'
    _raw(a, head=head, body=b"\x05\x00\x00\x00abcde")    # one element where the shape says two
    with pytest.raises(RtdError, match="BYTES element 1 truncated"):
        frames.Reader(b).recv()


def test_an_arena_the_peer_could_shrink_is_refused(pair):
    a, b = pair
    fd = os.memfd_create("unsealed", os.MFD_CLOEXEC)
    os.ftruncate(fd, 1 << 20)
    raw = HEADER.pack(MAGIC, VERSION, Kind.OK, 1, 1, 14, 0) + b'{"arena_fd":0}'
    a.sendmsg([raw], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, frames.array.array("i", [fd]))])
    os.close(fd)
    with pytest.raises(RtdError, match="not sealed against shrinking"):
        frames.Reader(b, frames.PeerArena()).recv()
