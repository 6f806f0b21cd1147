"""Verify-then-load without TOCTOU: the package holds sealed memfds of the bytes it hashed.

The race harness swaps the model file on disk while packages are being verified; every
outcome must be either a refusal or a package whose bytes are exactly the signed ones.
"""
import errno
import fcntl
import hashlib
import os
import threading

import numpy as np
import pytest

from rtd.errors import Code, RtdError
from rtd.loader import pack, sealed, verify_package

from loader_models import add_model


@pytest.fixture
def package_dir(tmp_path, signer, model_bytes):
    path = str(tmp_path / "adder")
    pack.write_directory(pack.package_files(model_bytes, name="adder", version="1.0.0", private_key=signer), path)
    return path


def test_memfd_is_sealed_and_read_only(package_dir, trust, model_bytes):
    with verify_package(package_dir, trust=trust, tenant="t", rollback=None) as pkg:
        fd = pkg.model.fd
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        assert seals & fcntl.F_SEAL_WRITE and seals & fcntl.F_SEAL_SHRINK and seals & fcntl.F_SEAL_GROW
        assert seals & fcntl.F_SEAL_SEAL
        with pytest.raises(OSError) as e:
            os.pwrite(fd, b"x", 0)
        assert e.value.errno == errno.EPERM
        with pytest.raises(OSError):
            os.ftruncate(fd, 0)
        with pytest.raises(TypeError):
            pkg.model.data[0] = 0
        assert os.pread(fd, len(model_bytes) + 1, 0) == model_bytes
        assert pkg.model.sha256 == hashlib.sha256(model_bytes).hexdigest()
    assert pkg.model.fd == -1


def test_file_rewritten_after_verification_changes_nothing(package_dir, trust, model_bytes):
    with verify_package(package_dir, trust=trust, tenant="t", rollback=None) as pkg:
        with open(os.path.join(package_dir, "1", "model.onnx"), "r+b") as f:
            f.write(b"\xff" * 16)
        assert pkg.model.bytes() == model_bytes


def test_race_swapping_the_model_during_verification(package_dir, trust, model_bytes):
    target = os.path.join(package_dir, "1", "model.onnx")
    evil = add_model(np.full((1, 4), 666, np.float32))
    signed_digest = hashlib.sha256(model_bytes).hexdigest()
    stop = threading.Event()

    def swapper():
        flip = 0
        while not stop.is_set():
            tmp = target + ".swap"
            with open(tmp, "wb") as f:
                f.write(evil if flip else model_bytes)
            os.replace(tmp, target)
            flip ^= 1

    outcomes = {"refused": 0, "verified": 0}
    thread = threading.Thread(target=swapper)
    thread.start()
    try:
        for _ in range(200):
            try:
                with verify_package(package_dir, trust=trust, tenant="t", rollback=None) as pkg:
                    assert hashlib.sha256(pkg.model.bytes()).hexdigest() == signed_digest
                    assert os.pread(pkg.model.fd, 1 << 20, 0) == model_bytes
                    outcomes["verified"] += 1
            except RtdError:
                outcomes["refused"] += 1
    finally:
        stop.set()
        thread.join()
    assert sum(outcomes.values()) == 200


def test_digest_is_of_the_held_bytes_while_the_source_is_rewritten_in_place(tmp_path):
    """seal_from_fd's digest must describe the memfd's bytes, not whatever the source held when
    hashed: a writer flips bytes of the source in place the whole time it is being copied."""
    path = str(tmp_path / "blob")
    size = 8 << 20
    with open(path, "wb") as f:
        f.write(bytes(size))
    stop = threading.Event()

    def rewriter():
        fd, flip = os.open(path, os.O_WRONLY), 0
        while not stop.is_set():
            for offset in range(0, size, 1 << 18):
                os.pwrite(fd, bytes([flip]) * 4096, offset)
            flip ^= 0xFF
        os.close(fd)

    thread = threading.Thread(target=rewriter)
    thread.start()
    try:
        for _ in range(20):
            src = os.open(path, os.O_RDONLY)
            try:
                held = sealed.seal_from_fd("blob", src, size)
            finally:
                os.close(src)
            try:
                assert held.sha256 == hashlib.sha256(os.pread(held.fd, size + 1, 0)).hexdigest()
                assert held.sha256 == hashlib.sha256(held.data).hexdigest()
            finally:
                held.close()
    finally:
        stop.set()
        thread.join()


def _open_memfds() -> list[str]:
    links = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            links.append(os.readlink(f"/proc/self/fd/{fd}"))
        except FileNotFoundError:   # the fd listdir itself used
            pass
    return sorted(link for link in links if link.startswith("/memfd:rtd:"))


def test_seal_from_fd_holds_exactly_the_range_and_refuses_a_short_file(tmp_path):
    path = tmp_path / "blob"
    payload = os.urandom(3 << 20)
    path.write_bytes(payload)
    before = _open_memfds()
    src = os.open(path, os.O_RDONLY)
    try:
        held = sealed.seal_from_fd("blob", src, 2 << 20, offset=12345)
        try:   # a range from an offset, nothing past it: what a plain tar member is
            assert held.bytes() == payload[12345:12345 + (2 << 20)]
            assert held.sha256 == hashlib.sha256(payload[12345:12345 + (2 << 20)]).hexdigest()
        finally:
            held.close()
        with pytest.raises(RtdError) as refusal:
            sealed.seal_from_fd("blob", src, len(payload) + 1, short_code=Code.E_ARCHIVE_INVALID)
        assert refusal.value.code is Code.E_ARCHIVE_INVALID
    finally:
        os.close(src)
    assert _open_memfds() == before
