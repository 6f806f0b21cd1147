"""Safe intake: one entry point that reads a package from wherever it comes, exactly once.

A source is a directory path or an open model directory (directory.py: a model repository's),
a .tar/.tar.gz path (archive.py) or a mapping of model-dir-relative paths to their bytes: bytes
themselves, or a place holding them that seals itself (`Extent`: a load request's file in its
spool, a blob of the registry), so an upload is never held in memory. The result is a FileSet
of sealed memfds; nothing is written to disk and a refusal closes everything read so far.
"""
import errno
import os
import typing
from collections.abc import Mapping

from rtd.errors import Code, RtdError
from rtd.loader import layout
from rtd.loader.archive import read_archive
from rtd.loader.directory import ModelDir, read_directory, read_model_dir
from rtd.loader.fileset import FileSet
from rtd.loader.sealed import SealedFile, seal_bytes

ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")


class Extent(typing.Protocol):
    """A file's bytes somewhere the caller keeps unchanged until the intake returns."""
    def __len__(self) -> int: ...                                             # the bytes it holds
    def seal(self, name: str, cap: int, code: Code) -> SealedFile: ...        # them, sealed (more than cap: code)


def _read_mapping(source: Mapping, files: FileSet) -> None:
    for path in sorted(source, key=str):
        parts = layout.split_relpath(path)
        data = source[path]
        name, raw = "/".join(parts), isinstance(data, (bytes, bytearray, memoryview))
        if not raw and not hasattr(data, "seal"):
            raise RtdError(Code.E_REQUEST_INVALID, f"{path!r} is not bytes")
        cap, code = files.admit(parts, len(data))
        files.add(parts, seal_bytes(name, data, cap, code) if raw else data.seal(name, cap, code))


def read_package(source, limits: layout.IntakeLimits = layout.IntakeLimits()) -> FileSet:
    """Read `source` into a FileSet of sealed memfds, or raise RtdError leaving nothing open."""
    if isinstance(source, Mapping):
        files, reader = FileSet(limits, Code.E_ONNX_LIMIT), _read_mapping
    elif isinstance(source, ModelDir):
        files, reader = FileSet(limits, Code.E_ONNX_LIMIT), read_model_dir
    elif isinstance(source, (str, os.PathLike)):
        source = os.fspath(source)
        if source.endswith(ARCHIVE_SUFFIXES):
            files, reader = FileSet(limits, Code.E_ARCHIVE_LIMIT), read_archive
        else:
            files, reader = FileSet(limits, Code.E_ONNX_LIMIT), read_directory
    else:
        raise RtdError(Code.E_REQUEST_INVALID, f"a package source is a path or a mapping, not {type(source).__name__}")
    try:
        reader(source, files)
    except OSError as e:   # an entry vanished or became unreadable between listing and reading
        files.close()
        code = Code.E_FILE_MISSING if e.errno == errno.ENOENT else Code.E_IO
        raise RtdError(code, f"reading the package: {e.strerror}") from None
    except BaseException:
        files.close()
        raise
    return files
