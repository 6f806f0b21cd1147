"""Reading a .tar / .tar.gz package: member by member into sealed memfds, never extracted.

A compressed archive is inflated by the standard library's gzip, bz2 or lzma reader and its
tar stream walked (tarfile "r|") through a SealedWriter; tarfile never sees compressed bytes
(Python 3.11.2's own gzip-header path raises AttributeError on a corrupt extra field); a plain tar is walked
header by header ("r:") and each member's bytes are read straight from their offset in the
archive (sealed.seal_from_fd), as fast as a directory package.
Nothing is written to disk. Only regular-file members whose names fit the layout are accepted
(directory members that are prefixes of the layout are skipped); symlink and hardlink members
are E_LINK_FORBIDDEN, devices and FIFOs E_SPECIAL_FILE, '..' / absolute / non-UTF-8 names
E_PATH_UNSAFE, duplicates and malformed streams E_ARCHIVE_INVALID. Member count, per-file and
total size and the compression ratio (uncompressed bytes over compressed bytes consumed) are
capped while streaming, so a bomb is refused with bounded memory: E_ARCHIVE_LIMIT.

Members may sit under one top directory (the model directory, whose name is then bound to the
signed name) or directly at the root (`config.pbtxt`, `<N>/...`).
"""
import bz2
import gzip
import lzma
import os
import tarfile
import zlib

from rtd.beneath import Dir
from rtd.errors import Code, RtdError
from rtd.loader import layout
from rtd.loader.fileset import FileSet
from rtd.loader.sealed import SealedWriter, seal_from_fd

_CHUNK = 1 << 20
_INFLATERS = {b"\x1f\x8b": gzip.open, b"BZh": bz2.open, b"\xfd7zXZ": lzma.open}   # magic -> reader
_RATIO_FLOOR = 32 << 20   # the ratio cap applies once this much has been inflated
MAX_EXTENDED_HEADER = 1 << 16
_EXTENDED = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.GNUTYPE_LONGNAME,
             tarfile.GNUTYPE_LONGLINK)


class _Inflation:
    def __init__(self, raw, limits: layout.IntakeLimits):
        self.raw, self.limits, self.inflated = raw, limits, 0

    def count(self, n: int) -> None:
        self.inflated += n
        if self.inflated > self.limits.max_total_bytes:
            raise RtdError(Code.E_ARCHIVE_LIMIT, f"archive inflates past {self.limits.max_total_bytes} bytes")
        consumed = max(self.raw.tell(), 1)
        if self.inflated > _RATIO_FLOOR and self.inflated > consumed * self.limits.max_compression_ratio:
            raise RtdError(Code.E_ARCHIVE_LIMIT,
                           f"compression ratio over {self.limits.max_compression_ratio}:1 ({self.inflated} from {consumed} bytes)")


class _BoundedInfo(tarfile.TarInfo):
    """tarfile reads a pax or GNU long-name header's data in one read of the size its header
    claims (2^62 raises MemoryError; 2^33 allocates 8 GiB first): refuse one past
    MAX_EXTENDED_HEADER before that read."""

    @classmethod
    def fromtarfile(cls, tarfile_):
        buf = tarfile_.fileobj.read(tarfile.BLOCKSIZE)
        obj = cls.frombuf(buf, tarfile_.encoding, tarfile_.errors)
        obj.offset = tarfile_.fileobj.tell() - tarfile.BLOCKSIZE
        if obj.type in _EXTENDED and obj.size > MAX_EXTENDED_HEADER:
            raise tarfile.HeaderError(f"an extended header claims {obj.size} bytes")
        return obj._proc_member(tarfile_)


def _member_parts(member: tarfile.TarInfo, files: FileSet, top: list) -> tuple[str, ...] | None:
    parts = layout.split_relpath(member.name.rstrip("/") if member.isdir() else member.name)
    if not top:   # the first member decides whether a top model directory is present
        top.append(None if parts == (layout.CONFIG,) or layout.is_version_dir(parts[0]) else parts[0])
    if top[0] is not None:
        if parts[0] != top[0]:
            raise RtdError(Code.E_ARCHIVE_INVALID, f"{member.name!r} is outside the top directory {top[0]!r}")
        files.model_dir_name = top[0]
        parts = parts[1:]
    if member.isdir():
        if len(parts) > 1 or (parts and not layout.is_version_dir(parts[0])):
            raise RtdError(Code.E_FILE_UNLISTED, f"directory {member.name!r} is not part of the layout")
        return None
    return parts


def _check_type(member: tarfile.TarInfo) -> None:
    if member.issym() or member.islnk():
        raise RtdError(Code.E_LINK_FORBIDDEN, f"{member.name!r} is a link member")
    if member.ischr() or member.isblk() or member.isfifo():
        raise RtdError(Code.E_SPECIAL_FILE, f"{member.name!r} is a device or FIFO member")
    if not (member.isreg() or member.isdir()) or member.type == tarfile.CONTTYPE or member.issparse():
        raise RtdError(Code.E_ARCHIVE_INVALID, f"{member.name!r} has unsupported member type {member.type!r}")


def _read_member(stream: tarfile.TarFile, member, parts, files: FileSet, inflation: _Inflation) -> None:
    cap, code = files.admit(parts, member.size)
    if inflation is None:   # uncompressed: the member's bytes sit in the file, read from their offset
        files.add(parts, seal_from_fd("/".join(parts), stream.fileobj.fileno(), member.size,
                                      member.offset_data, Code.E_ARCHIVE_INVALID))
        return
    source = stream.extractfile(member)
    writer = SealedWriter("/".join(parts), cap, code)
    try:
        while chunk := source.read(_CHUNK):
            inflation.count(len(chunk))
            writer.write(chunk)
        files.add(parts, writer.seal())
    finally:
        writer.discard()


def read_archive(path: str, files: FileSet) -> None:
    """Stream a tar (optionally gzip/bz2/xz compressed) package into `files`."""
    directory, name = os.path.split(os.path.abspath(path))
    with Dir.open(directory) as parent:   # the archive itself: no link, no FIFO, a regular file
        archive = parent.open_file(name, 2 * files.limits.max_total_bytes + (1 << 20), Code.E_ARCHIVE_LIMIT, allow_links=True)
    with os.fdopen(archive.fd, "rb") as raw:
        head = raw.read(6)
        raw.seek(0)
        inflater = next((opener for magic, opener in _INFLATERS.items() if head.startswith(magic)), None)
        inflation, top, members = (_Inflation(raw, files.limits) if inflater else None), [], 0
        try:
            tar = (dict(fileobj=inflater(raw, "rb"), mode="r|", bufsize=_CHUNK) if inflater else dict(fileobj=raw, mode="r:"))
            with tarfile.open(tarinfo=_BoundedInfo, **tar) as stream:
                for member in stream:
                    members += 1
                    if members > files.limits.max_archive_members:
                        raise RtdError(Code.E_ARCHIVE_LIMIT, f"more than {files.limits.max_archive_members} members")
                    _check_type(member)
                    parts = _member_parts(member, files, top)
                    if parts:
                        _read_member(stream, member, parts, files, inflation)
        except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, OSError, ValueError) as e:
            raise RtdError(Code.E_ARCHIVE_INVALID, f"{type(e).__name__}: {e}") from None
    if not members:
        raise RtdError(Code.E_ARCHIVE_INVALID, "the archive has no members")
