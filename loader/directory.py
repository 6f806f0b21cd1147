"""Reading a package directory: every file opened once, beneath a directory fd, never by path.

Each entry is one path component checked by the layout, inspected with fstatat(AT_SYMLINK_NOFOLLOW)
and only then opened relative to its directory fd with O_NOFOLLOW|O_NONBLOCK. Since names never
contain '/', that gives openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS) semantics without the
syscall: no component is resolved through a link and nothing escapes the package directory.
Symlinks and hardlinked files (nlink > 1) are E_LINK_FORBIDDEN, FIFOs/devices/sockets
E_SPECIAL_FILE (never opened, so a FIFO cannot block), and the opened inode must be the one
inspected. The bytes go straight into a sealed memfd (sealed.seal_from_fd).

The source may be the model directory (config.pbtxt + one numeric version directory) or a
version directory itself, whose parent's config.pbtxt then belongs to the package.
"""
import errno
import os
import stat

from rtd.errors import Code, RtdError
from rtd.loader import layout
from rtd.loader.fileset import FileSet
from rtd.loader.sealed import seal_from_fd

_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _refuse_non_regular(mode: int, path: str) -> None:
    if stat.S_ISLNK(mode):
        raise RtdError(Code.E_LINK_FORBIDDEN, f"{path} is a symlink")
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise RtdError(Code.E_SPECIAL_FILE, f"{path} is not a regular file")


def _open_dir(name: str, dir_fd: int | None, path: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):   # O_DIRECTORY|O_NOFOLLOW on a symlink: ENOTDIR
            _refuse_non_regular(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode, path)
            raise RtdError(Code.E_SPECIAL_FILE, f"{path} is not a directory") from None
        if e.errno == errno.ENOENT:
            raise RtdError(Code.E_FILE_MISSING, f"{path} does not exist") from None
        raise


def _read_file(dir_fd: int, parts: tuple[str, ...], files: FileSet) -> None:
    path = "/".join(parts)
    before = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
    _refuse_non_regular(before.st_mode, path)
    if before.st_nlink != 1:
        raise RtdError(Code.E_LINK_FORBIDDEN, f"{path} has {before.st_nlink} hard links")
    files.admit(parts, before.st_size)
    try:
        fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise RtdError(Code.E_LINK_FORBIDDEN, f"{path} became a symlink") from None
        raise
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (before.st_dev, before.st_ino) or not stat.S_ISREG(st.st_mode):
            raise RtdError(Code.E_SPECIAL_FILE, f"{path} was replaced while being opened")
        if st.st_nlink != 1:
            raise RtdError(Code.E_LINK_FORBIDDEN, f"{path} has {st.st_nlink} hard links")
        files.admit(parts, st.st_size)
        files.add(parts, seal_from_fd(path, fd, st.st_size))
    finally:
        os.close(fd)


def _read_version_dir(dir_fd: int, version: str, files: FileSet) -> None:
    for name in sorted(os.listdir(dir_fd)):
        parts = (version, layout.check_component(name))
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
        if stat.S_ISDIR(mode):
            raise RtdError(Code.E_FILE_UNLISTED, f"{'/'.join(parts)} is a directory")
        _read_file(dir_fd, parts, files)


def _read_model_dir(dir_fd: int, files: FileSet) -> None:
    for name in sorted(os.listdir(dir_fd)):
        layout.check_component(name)
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
        _refuse_non_regular(mode, name)
        if stat.S_ISDIR(mode):
            layout.classify((name, layout.MODEL))   # only numeric version directories
            sub_fd = _open_dir(name, dir_fd, name)
            try:
                _read_version_dir(sub_fd, name, files)
            finally:
                os.close(sub_fd)
        else:
            _read_file(dir_fd, (name,), files)


def read_directory(path: str, files: FileSet) -> None:
    """Read a model directory or a version directory into `files`."""
    try:
        _read_tree(path, files)
    except OSError as e:   # an entry vanished or became unreadable between listing and reading
        raise RtdError(Code.E_FILE_MISSING, f"{e.filename or path}: {e.strerror}") from None


def _read_tree(path: str, files: FileSet) -> None:
    top_fd = _open_dir(path, None, path)
    try:
        if layout.MANIFEST in os.listdir(top_fd):
            version = os.path.basename(os.path.normpath(path))
            if not layout.is_version_dir(version):
                raise RtdError(Code.E_BINDING_MISMATCH, f"version directory {version!r} is not a number")
            _read_version_dir(top_fd, version, files)
            parent_fd = _open_dir("..", top_fd, "..")
            try:
                if layout.CONFIG in os.listdir(parent_fd):
                    _read_file(parent_fd, (layout.CONFIG,), files)
            finally:
                os.close(parent_fd)
        else:
            _read_model_dir(top_fd, files)
    finally:
        os.close(top_fd)
