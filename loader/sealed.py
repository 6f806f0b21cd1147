"""Bytes held in a sealed memfd, hashed exactly once on their way in.

A SealedFile is the only form in which package bytes leave intake: the memfd is sealed
against write, shrink and grow, so the bytes the manifest vouched for are the bytes the
worker receives (its fd is handed over; nothing re-opens a path). `.data` is a read-only
memoryview over a private mapping of the same memfd; only the small documents and a model's
first and last bytes are ever read through it, so a big file's pages are never faulted into
the supervisor.

A file of a spooled upload or of the registry's blobs (`FileExtent`) is copied into its memfd
by the kernel (seal_copy: copy_file_range or sendfile), sealed, and only then hashed from the
sealed memfd in chunks: never held whole in the supervisor's memory. A memfd a confined
decoder filled is taken over the same way (seal_memfd).
"""
import concurrent.futures
import errno
import fcntl
import hashlib
import mmap
import os
import time

from rtd.errors import Code, RtdError
from rtd.files import copy_fd

_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL
_COPIER = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rtd-seal")  # its thread starts on first use
_SEAL_ATTEMPTS = 10  # about 2 s in all with the kernel's own waits
_CHUNK = 1 << 20  # one reused buffer, small enough to stay in L2 from read through hash to write


class SealedFile:
    """Immutable bytes: `.fd` (sealed memfd), `.data` (read-only memoryview), `.size`, `.sha256` (hex)."""

    __slots__ = ("name", "fd", "size", "sha256", "data", "_map")

    def __init__(self, name: str, fd: int, size: int, sha256: str, mapping):
        self.name, self.fd, self.size, self.sha256, self._map = name, fd, size, sha256, mapping
        self.data = memoryview(mapping) if mapping is not None else memoryview(b"")

    def bytes(self) -> bytes:
        return self.data.tobytes()

    def close(self) -> None:
        if self.fd < 0:
            return
        try:
            self.data.release()
            if self._map is not None:
                self._map.close()
        except BufferError:
            pass   # a caller still holds a view: the mapping goes with the last view, the memfd now
        os.close(self.fd)
        self.fd = -1

    def __repr__(self) -> str:
        return f"SealedFile({self.name!r}, size={self.size}, sha256={self.sha256[:12]}...)"


def _new_memfd(name: str) -> int:
    return os.memfd_create("rtd:" + name[-200:], os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)


def _finish(name: str, fd: int, size: int, digest, mapping) -> SealedFile:
    # mappings are MAP_PRIVATE: the kernel refuses F_SEAL_WRITE while a shared one exists
    _add_seals(fd)
    return SealedFile(name, fd, size, digest.hexdigest(), mapping)


def _add_seals(fd: int) -> None:
    """F_ADD_SEALS, asked again while the kernel answers EBUSY: besides a writable shared mapping
    (which nothing here makes), F_SEAL_WRITE is refused while any page holds a reference other
    than the page cache's and its mappings, and reclaim or compaction take such references for a
    moment; the kernel waits only ~150 ms for them to go, which a loaded host can outlast (CI
    saw a model-sized memfd refused once under load)."""
    for attempt in range(_SEAL_ATTEMPTS):
        try:
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
            return
        except OSError as e:
            if e.errno != errno.EBUSY or attempt == _SEAL_ATTEMPTS - 1:
                raise
            time.sleep(0.05)


def seal_from_fd(name: str, src_fd: int, size: int, offset: int = 0,
                 short_code: Code = Code.E_DIGEST_MISMATCH) -> SealedFile:
    """Copy `size` bytes from `offset` of a regular file into a new sealed memfd. Each chunk is read
    once into a private buffer, hashed there and written from there, so the digest is of exactly the
    bytes the memfd holds whatever the file does meanwhile. A file that ends early (e.g. shrank while
    being read) is refused with `short_code`; bytes past `size` are never read."""
    # pread+hash+write used 3-5% less CPU than sendfile into the memfd then hashing it through a
    # mapping (no page faults, no splice pipe) in 5 of 6 paired runs (bench/verify.py --strategies).
    writer = SealedWriter(name, size, short_code)
    buf = memoryview(bytearray(min(_CHUNK, size)))
    try:
        done = 0
        while done < size:
            n = os.preadv(src_fd, [buf[:size - done]], offset + done)
            if n <= 0:
                raise RtdError(short_code, f"{name} ended {size - done} bytes early")
            writer.write(buf[:n])
            done += n
        return writer.seal()
    except BaseException:
        writer.discard()
        raise


def seal_copy(name: str, src_fd: int, size: int, offset: int = 0, short_code: Code = Code.E_DIGEST_MISMATCH) -> SealedFile:
    """`size` bytes from `offset` of a file nobody changes meanwhile, copied into a new memfd by
    the kernel, sealed and hashed (seal_memfd). A file that ends early is refused with `short_code`."""
    fd = _new_memfd(name)
    try:
        copy_fd(src_fd, fd, size, offset)
    except OSError as e:
        os.close(fd)
        raise RtdError(short_code, f"{name}: {e.strerror}") from None
    return seal_memfd(name, fd, size, short_code)


def seal_memfd(name: str, fd: int, size: int, code: Code = Code.E_DIGEST_MISMATCH) -> SealedFile:
    """A memfd someone else filled (the kernel's copy, a confined decoder), taken over: sealed
    against any further change (refused with `code` if it cannot be: not a memfd, sealing not
    allowed, a writable mapping still open), checked to hold exactly `size` bytes, then hashed
    from the sealed memfd itself, 1 MiB at a time, so the digest is of exactly the bytes held.
    The fd is the SealedFile's from here on, or closed."""
    try:
        try:
            _add_seals(fd)
        except OSError as e:
            raise RtdError(code, f"{name} cannot be sealed: {e.strerror}") from None
        if fcntl.fcntl(fd, fcntl.F_GET_SEALS) & _SEALS != _SEALS or os.fstat(fd).st_size != size:
            raise RtdError(code, f"{name} does not hold the {size} bytes it was said to")
        digest, buf, done = hashlib.sha256(), memoryview(bytearray(min(_CHUNK, size))), 0
        while done < size:
            n = os.preadv(fd, [buf[:size - done]], done)
            digest.update(buf[:n])
            done += n
        mapping = mmap.mmap(fd, size, mmap.MAP_PRIVATE, mmap.PROT_READ) if size else None
        return SealedFile(name, fd, size, digest.hexdigest(), mapping)
    except BaseException:
        os.close(fd)
        raise


class FileExtent:
    """`size` bytes at `offset` of an open file nobody changes while it is read (a spooled upload,
    a registry blob): an intake source (loader.intake.Extent). `owned`: close() closes the fd."""

    def __init__(self, fd: int, offset: int, size: int, owned: bool = False):
        self.fd, self.offset, self.size, self.owned = fd, offset, size, owned

    def __len__(self) -> int:
        return self.size

    def seal(self, name: str, cap: int, code: Code) -> SealedFile:
        if self.size > cap:
            raise RtdError(code, f"{name} is {self.size} bytes, over the {cap}-byte cap")
        return seal_copy(name, self.fd, self.size, self.offset)

    def close(self) -> None:
        if self.owned and self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class SealedWriter:
    """Builds a SealedFile from streamed chunks (archive members, uploaded bytes); `cap` bounds it."""

    def __init__(self, name: str, cap: int, code: Code = Code.E_ARCHIVE_LIMIT):
        self.name, self.cap, self.code = name, cap, code
        self.fd, self.size, self.digest = _new_memfd(name), 0, hashlib.sha256()

    def write(self, chunk) -> None:
        self.size += len(chunk)
        if self.size > self.cap:
            raise RtdError(self.code, f"{self.name} is larger than {self.cap} bytes")
        # The copy into the memfd runs on the copier thread while this one hashes the same
        # unchanging chunk (both release the GIL): the digest is still of exactly the bytes
        # written, and on an idle second core the copy costs no wall time.
        copying = _COPIER.submit(_write_all, self.fd, chunk)
        try:
            self.digest.update(chunk)
        finally:
            copying.result()

    def seal(self) -> SealedFile:
        mapping = mmap.mmap(self.fd, self.size, mmap.MAP_PRIVATE, mmap.PROT_READ) if self.size else None
        fd, self.fd = self.fd, -1
        return _finish(self.name, fd, self.size, self.digest, mapping)

    def discard(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _write_all(fd: int, chunk) -> None:
    view = memoryview(chunk)
    while view:
        view = view[os.write(fd, view):]


def seal_bytes(name: str, data, cap: int, code: Code) -> SealedFile:
    writer = SealedWriter(name, cap, code)
    try:
        writer.write(data)
        return writer.seal()
    except BaseException:
        writer.discard()
        raise
