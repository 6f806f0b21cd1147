"""The worker wire format over a real socketpair: inline and memfd tensors, and refusals of
every malformed frame before any array is built."""
import os
import array
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


def test_round_trip_inline_and_memfd(pair):
    a, b = pair
    small = np.arange(12, dtype=np.float32).reshape(3, 4)
    big = np.random.default_rng(0).standard_normal((512, 512))  # 2 MiB → memfd
    frames.send(a, Kind.INFER, 7, {"key": "m"}, {"small": small, "big": big, "empty": np.zeros((0, 3), np.int64)})
    got = frames.recv(b)
    assert (got.kind, got.request_id, got.head, got.fds) == (Kind.INFER, 7, {"key": "m"}, [])
    np.testing.assert_array_equal(got.tensors["small"], small)
    np.testing.assert_array_equal(got.tensors["big"], big)
    assert got.tensors["empty"].shape == (0, 3)
    assert not got.tensors["big"].flags.writeable


def test_extra_fd_is_handed_to_the_caller(pair):
    a, b = pair
    fd = frames.memfd_from(b"model bytes")
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
    ({"head": b'{"tensors":[{"name":"x","dtype":"uint8","shape":[1],"fd":0}]}'}, "bad fd index"),
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


def test_memfd_shorter_than_claimed_is_refused(pair):
    a, b = pair
    fd = frames.memfd_from(b"abc")
    head = b'{"tensors":[{"name":"x","dtype":"float64","shape":[100],"fd":0}]}'
    a.sendmsg([HEADER.pack(MAGIC, VERSION, Kind.OK, 1, 1, len(head), 0) + head],
              [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
    os.close(fd)
    with pytest.raises(RtdError, match="memfd holds 3 bytes"):
        frames.recv(b)


def test_memfd_is_sealed():
    import fcntl
    fd = frames.memfd_from(b"x" * 10)
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        assert seals & fcntl.F_SEAL_WRITE and seals & fcntl.F_SEAL_SEAL
        with pytest.raises(OSError):
            os.write(fd, b"y")
    finally:
        os.close(fd)


def test_eof_is_reported(pair):
    a, b = pair
    a.close()
    with pytest.raises(EOFError):
        frames.recv(b)
