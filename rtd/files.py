"""Durable whole-file replacement: the one way rtd persists state (registry, rollback marks).

The bytes go to a temporary file in the same directory, are fsynced, renamed over the
target and the directory is fsynced: after a crash the target holds either the old or the
new content, never a torn mix, and no temporary file outlives a failed write.
"""
import os
import re
import tempfile


def write_atomic(path: str, data, mode: int = 0o600) -> None:
    """`data`: any bytes-like object (a memoryview over sealed bytes is written without a copy)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=directory)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
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
