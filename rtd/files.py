"""Durable whole-file replacement: the one way rtd persists state (registry, rollback marks,
trust stores), and the one way it reads a small state file back.

The bytes go to a temporary file in the same directory, are fsynced, renamed over the
target and the directory is fsynced: after a crash the target holds either the old or the
new content, never a torn mix, and no temporary file outlives a failed write.

A small state file is kept twice (`write_durable`): the file, then its `.last-good` copy,
so a file damaged on disk (emptied, truncated, overwritten) has a good copy beside it, at
most one change behind. `read_copies` reads both beneath their directory (rtd.beneath: no
link, no FIFO, a size cap) and says what each held and what was wrong, in words that never
quote the file; its caller decides what a damaged pair means.
"""
import dataclasses
import errno
import json
import logging
import os
import re
import tempfile
import time

from rtd.beneath import Dir
from rtd.errors import Code, RtdError

LAST_GOOD = ".last-good"
log = logging.getLogger("rtd.files")


def write_atomic(path: str, data=None, mode: int = 0o600, *, source_fd: int = -1, size: int = 0) -> None:
    """`data`: any bytes-like object; or `size` bytes of `source_fd` from its start, copied by the
    kernel (copy_file_range, or sendfile across filesystems) so they never pass through memory."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=directory)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            if source_fd >= 0:
                copy_fd(source_fd, f.fileno(), size)
            else:
                f.write(data)
                f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def copy_fd(src: int, dst: int, size: int, offset: int = 0) -> None:
    """`size` bytes of `src` from `offset` to the start of `dst`, in the kernel; OSError(EIO) if `src` ends early."""
    done = 0
    while done < size:
        try:
            n = os.copy_file_range(src, dst, size - done, offset + done, done)
        except OSError as e:
            if e.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):   # not between these two
                raise
            os.lseek(dst, done, os.SEEK_SET)
            n = os.sendfile(dst, src, offset + done, size - done)
        if n == 0:
            raise OSError(errno.EIO, f"the source ended {size - done} bytes early")
        done += n


def write_durable(path: str, data: bytes, mode: int = 0o600) -> None:
    """The file, then its last good copy. A copy that cannot be written lags one change behind
    (still a good one) and is logged; the file itself failing raises."""
    write_atomic(path, data, mode)
    try:
        write_atomic(path + LAST_GOOD, data, mode)
    except OSError as e:
        log.warning("%s%s lags one change behind: %s", path, LAST_GOOD, e.strerror)


@dataclasses.dataclass
class Copies:
    """A durable file as found: what each copy held once parsed (None: absent or unusable) and,
    for each unusable one, why (never quoting it)."""
    name: str
    main: object = None
    last_good: object = None
    present: list = dataclasses.field(default_factory=list)    # which copies exist: "file", "last good copy"
    problems: list = dataclasses.field(default_factory=list)   # "<name>: why" of each copy present but unusable

    def usable(self):
        """The file's value, else its last good copy's, else None."""
        return self.main if self.main is not None else self.last_good

    def lost(self) -> str | None:
        """Why neither copy can be used although one exists (None: one is usable, or neither was ever written)."""
        if self.usable() is not None or not self.present:
            return None
        first = self.problems[0] if self.problems else f"{self.name}: unusable"
        return f"{self.name} and its last good copy are unusable ({first})"


def read_copies(directory: Dir, name: str, parse, max_bytes: int, allow_links: bool = False) -> Copies:
    """Both copies of `name` beneath `directory`, each read (at most max_bytes, a regular file) and
    parsed by `parse(bytes)`, which raises ValueError or RtdError for what it refuses."""
    copies = Copies(name)
    for which, rel in (("file", name), ("last good copy", name + LAST_GOOD)):
        try:
            data = directory.read(rel, max_bytes, Code.E_STATE_DAMAGED, allow_links)
        except RtdError as e:
            if e.code is not Code.E_FILE_MISSING:
                copies.present.append(which)
                copies.problems.append(f"{rel}: {e.detail}")
            continue
        copies.present.append(which)
        try:
            value = parse(data)
        except json.JSONDecodeError as e:   # its msg is the grammar's expectation, never the text found
            copies.problems.append(f"{rel}: not JSON ({e.msg}: line {e.lineno} column {e.colno})")
            continue
        except (ValueError, RtdError) as e:
            copies.problems.append(f"{rel}: {e.detail if isinstance(e, RtdError) else e}")
            continue
        if which == "file":
            copies.main = value
        else:
            copies.last_good = value
    return copies


def set_aside(path: str) -> str | None:
    """Rename a damaged file out of the way (kept for the operator); its new path, or None if it is gone."""
    aside = f"{path}.damaged-{time.time_ns()}"
    try:
        os.replace(path, aside)
    except FileNotFoundError:
        return None
    return aside


_TEMPORARY = re.compile(r"\.(.+)\.[a-z0-9_]{8}")   # what mkstemp(prefix=".<name>.") makes


def remove_temporaries(directory: str) -> list[str]:
    """Remove what an interrupted write_atomic left in `directory` (a kill -9 between the
    temporary file and the rename); returns the names removed."""
    removed = []
    for name in os.listdir(directory):
        if _TEMPORARY.fullmatch(name) and os.path.isfile(os.path.join(directory, name)):
            os.unlink(os.path.join(directory, name))
            removed.append(name)
    return removed
