"""Opening what a tenant or a config names: beneath one directory, never through a link, never blocking.

The root supervisor opens every path a tenant controls (its model repository) or a config
names (trust stores, revocation lists, token files, the state directory's own small files)
through a `Dir`: a directory opened once by the operator's path, below which every name is
resolved by the kernel with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV). Nothing below the root is reached through a
symlink, `..`, a /proc magic link or another mount, so whatever a tenant plants in its tree
it can only name its own files, and an answer never says whether a path outside exists.
Where the kernel lacks openat2 (before 5.6, or a filter answering ENOSYS) the same walk is
made one component at a time, each opened O_NOFOLLOW relative to the last and kept on the
root's device.

A file is inspected before it is opened and checked again once open: fstatat(AT_SYMLINK_NOFOLLOW)
of its last component must show a regular file, so a FIFO, socket or device is refused
without being opened (no FIFO can block, no driver is asked anything); it is then opened
O_RDONLY|O_NONBLOCK|O_NOCTTY|O_NOFOLLOW and fstat'd: the same inode, still regular, one
hard link (a hard link could name another tenant's file), within the caller's size cap —
all before its first byte is read, and no more than the cap is ever read.

Why the kernel and not a confined reader: the checks are a handful of syscalls per file in
the caller's own thread, with no process, no copy through a pipe and no second parser of
the result; a tenant's uid would add nothing once links, mounts and special files are
refused (the files are the tenant's own either way). Hard links are refused instead.

Refusals are RtdErrors naming the path relative to the root and what it is (E_LINK_FORBIDDEN,
E_SPECIAL_FILE, E_FILE_MISSING, E_PATH_UNSAFE, or the caller's code for a size cap), never
anything read from a file.
"""
import ctypes
import errno
import os
import stat

from rtd.errors import Code, RtdError

MAX_ENTRIES = 4096   # names one directory listing may return
SYS_OPENAT2 = 437    # the same on every architecture rtd runs on (asm-generic numbering since 5.1)
RESOLVE_NO_XDEV, RESOLVE_NO_MAGICLINKS, RESOLVE_NO_SYMLINKS, RESOLVE_BENEATH = 0x01, 0x02, 0x04, 0x08
RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV
FILE_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_NOFOLLOW | os.O_CLOEXEC
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
PATH_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _openat2(dir_fd: int, path: str, flags: int) -> int:
    how = _OpenHow(flags, 0, RESOLVE)
    fd = _libc.syscall(ctypes.c_long(SYS_OPENAT2), ctypes.c_int(dir_fd), path.encode(), ctypes.byref(how),
                       ctypes.c_size_t(ctypes.sizeof(how)))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return fd


def _kernel_has_openat2() -> bool:
    root = os.open("/", os.O_PATH | os.O_CLOEXEC)
    try:
        os.close(_openat2(root, ".", os.O_PATH | os.O_CLOEXEC))
    except OSError as e:
        if e.errno in (errno.ENOSYS, errno.EPERM, errno.E2BIG, errno.EINVAL):
            return False
    finally:
        os.close(root)
    return True


HAS_OPENAT2 = _kernel_has_openat2()


def _components(rel: str) -> list[str]:
    """A relative path as its components: no absolute path, empty component, `.`, `..` or NUL."""
    parts = rel.split("/") if rel else []
    if not isinstance(rel, str) or "\0" in rel or any(p in ("", ".", "..") for p in parts):
        raise RtdError(Code.E_PATH_UNSAFE, f"{rel[:200]!r} is not a plain relative path")
    return parts


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device node"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def refuse_kind(mode: int, where: str, want: str = "a regular file") -> None:
    """E_LINK_FORBIDDEN for a symlink, E_SPECIAL_FILE for anything but `want`."""
    found = _kind(mode)
    if found == want:
        return
    if found == "a symlink":
        raise RtdError(Code.E_LINK_FORBIDDEN, f"{where} is a symlink")
    raise RtdError(Code.E_SPECIAL_FILE, f"{where} is {found}, not {want}")


class File:
    """An open regular file beneath a Dir, checked: `.fd`, `.size` (from fstat, before any read)."""

    def __init__(self, fd: int, size: int, where: str):
        self.fd, self.size, self.where = fd, size, where

    def read(self) -> bytes:
        """All `size` bytes (no more: a file that grew since its fstat is refused by its caller's cap)."""
        chunks, done = [], 0
        while done < self.size:
            chunk = os.pread(self.fd, min(self.size - done, 1 << 20), done)
            if not chunk:
                raise RtdError(Code.E_FILE_MISSING, f"{self.where} ended {self.size - done} bytes early")
            chunks.append(chunk)
            done += len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> "File":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Dir:
    """An open directory; every path given to its methods is resolved beneath it (see the module)."""

    def __init__(self, fd: int, label: str, dev: int, use_openat2: bool):
        self.fd, self.label, self.dev, self.use_openat2 = fd, label, dev, use_openat2

    @classmethod
    def open(cls, path: str, label: str | None = None, use_openat2: bool | None = None) -> "Dir":
        """The root: the operator's own path, taken as it is (a link the operator made is followed);
        `label` is how refusals name it (default: the path)."""
        label = label or path
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as e:
            raise _refusal(e, label) from None
        return cls(fd, label, os.fstat(fd).st_dev, HAS_OPENAT2 if use_openat2 is None else use_openat2)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> "Dir":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def where(self, rel: str) -> str:
        return f"{self.label}/{rel}" if rel else self.label

    # -- resolution -------------------------------------------------------------------------------
    def _resolve(self, parts: list[str], flags: int) -> int:
        """An fd of parts (opened with `flags`), every component beneath the root, none a link."""
        if self.use_openat2:   # RESOLVE_NO_SYMLINKS refuses a trailing link too (ELOOP), where O_NOFOLLOW says ENOTDIR
            return _openat2(self.fd, "/".join(parts) or ".", flags & ~os.O_NOFOLLOW)
        cur = os.dup(self.fd)
        try:
            for i, part in enumerate(parts):
                last = i == len(parts) - 1
                if stat.S_ISLNK(os.stat(part, dir_fd=cur, follow_symlinks=False).st_mode):   # as openat2 says it
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), part)
                fd = os.open(part, flags if last else PATH_FLAGS, dir_fd=cur)
                os.close(cur)
                cur = fd
                if os.fstat(cur).st_dev != self.dev:   # another mount: RESOLVE_NO_XDEV's refusal
                    raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), part)
            if not parts:
                fd = os.open(".", flags, dir_fd=cur)
                os.close(cur)
                cur = fd
            return cur
        except BaseException:
            os.close(cur)
            raise

    def _parent(self, rel: str) -> tuple[int, str, list[str]]:
        """(an O_PATH fd of rel's directory, rel's last component, rel's components)."""
        parts = _components(rel)
        if not parts:
            raise RtdError(Code.E_PATH_UNSAFE, "an empty path names no file")
        try:
            return self._resolve(parts[:-1], PATH_FLAGS), parts[-1], parts
        except OSError as e:
            raise _refusal(e, self.where("/".join(parts[:-1]))) from None

    def lstat(self, rel: str) -> os.stat_result:
        """What `rel` is, never following it (E_FILE_MISSING when absent)."""
        parent, name, _ = self._parent(rel)
        try:
            return os.stat(name, dir_fd=parent, follow_symlinks=False)
        except OSError as e:
            raise _refusal(e, self.where(rel)) from None
        finally:
            os.close(parent)

    def exists(self, rel: str) -> bool:
        try:
            self.lstat(rel)
        except RtdError as e:
            if e.code is Code.E_FILE_MISSING:
                return False
            raise
        return True

    def subdir(self, rel: str) -> "Dir":
        """The directory `rel` beneath this one, itself a Dir (closed by its caller)."""
        parts = _components(rel)
        try:
            fd = self._resolve(parts, DIR_FLAGS)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR) and parts:
                refuse_kind(self.lstat(rel).st_mode, self.where(rel), "a directory")
            raise _refusal(e, self.where(rel)) from None
        return Dir(fd, self.where(rel), self.dev, self.use_openat2)

    def entries(self, rel: str = "", limit: int = MAX_ENTRIES) -> list[tuple[str, str]]:
        """(name, kind) of each entry of directory `rel`, sorted, at most `limit` (E_FILE_UNLISTED past it);
        kind as refusals name it ("a regular file", "a directory", "a symlink", "a FIFO", ...), from the
        directory entry itself, never followed."""
        with self.subdir(rel) as d:   # opened afresh even for "": a listing has its own offset, whoever else lists
            found = []
            with os.scandir(d.fd) as listing:
                for entry in listing:
                    if len(found) >= limit:
                        raise RtdError(Code.E_FILE_UNLISTED, f"{d.label} holds more than {limit} entries")
                    try:
                        mode = entry.stat(follow_symlinks=False).st_mode
                    except FileNotFoundError:
                        continue   # gone since listed
                    found.append((entry.name, _kind(mode)))
        return sorted(found)

    def open_file(self, rel: str, max_bytes: int, code: Code = Code.E_FILE_UNLISTED, allow_links: bool = False) -> File:
        """Regular file `rel`, open and checked (see the module); over `max_bytes` is `code`.
        `allow_links`: a file with other hard links is accepted (an operator's own directory)."""
        parent, name, _ = self._parent(rel)
        where = self.where(rel)
        try:
            try:
                before = os.stat(name, dir_fd=parent, follow_symlinks=False)
            except OSError as e:
                raise _refusal(e, where) from None
            refuse_kind(before.st_mode, where)
            try:
                fd = _openat2(parent, name, FILE_FLAGS) if self.use_openat2 else os.open(name, FILE_FLAGS, dir_fd=parent)
            except OSError as e:
                raise _refusal(e, where) from None
        finally:
            os.close(parent)
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != (before.st_dev, before.st_ino):
                raise RtdError(Code.E_SPECIAL_FILE, f"{where} was replaced while being opened")
            refuse_kind(st.st_mode, where)
            if st.st_nlink != 1 and not allow_links:
                raise RtdError(Code.E_LINK_FORBIDDEN, f"{where} has {st.st_nlink} hard links")
            if st.st_size > max_bytes:
                raise RtdError(code, f"{where} is {st.st_size} bytes, over the {max_bytes}-byte cap")
            return File(fd, st.st_size, where)
        except BaseException:
            os.close(fd)
            raise

    def read(self, rel: str, max_bytes: int, code: Code = Code.E_FILE_UNLISTED, allow_links: bool = False) -> bytes:
        with self.open_file(rel, max_bytes, code, allow_links) as f:
            return f.read()


def read_file(path: str, max_bytes: int, code: Code = Code.E_FILE_UNLISTED, allow_links: bool = False) -> bytes:
    """A file the operator's config names by path (a token, a key): its directory is the root."""
    directory, name = os.path.split(os.path.abspath(path))
    with Dir.open(directory) as d:
        return d.read(name, max_bytes, code, allow_links)


def _refusal(e: OSError, where: str) -> RtdError:
    """What went wrong at `where`, in words that hold nothing read from any file and say nothing
    of what lies outside the root."""
    if e.errno == errno.ELOOP:
        return RtdError(Code.E_LINK_FORBIDDEN, f"{where} is or passes through a symlink")
    if e.errno == errno.EXDEV:
        return RtdError(Code.E_PATH_UNSAFE, f"{where} leaves its directory or crosses a mount point")
    if e.errno == errno.ENOENT:
        return RtdError(Code.E_FILE_MISSING, f"{where} does not exist")
    if e.errno == errno.ENOTDIR:
        return RtdError(Code.E_SPECIAL_FILE, f"{where}: a component is not a directory")
    if e.errno in (errno.ENXIO, errno.ENODEV, errno.EOPNOTSUPP):
        return RtdError(Code.E_SPECIAL_FILE, f"{where} is not a regular file")
    if e.errno in (errno.EACCES, errno.EPERM):
        return RtdError(Code.E_PERMISSION_DENIED, f"{where}: {e.strerror}")
    return RtdError(Code.E_IO, f"{where}: {e.strerror}")
