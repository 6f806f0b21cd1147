"""Safe intake: one entry point that reads a package from wherever it comes, exactly once.

A source is a directory path (directory.py), a .tar/.tar.gz path (archive.py) or a mapping of
model-dir-relative paths to bytes, as a gRPC RepositoryModelLoad upload carries them. The
result is a FileSet of sealed memfds; nothing is written to disk and a refusal closes
everything read so far.
"""
import os
from collections.abc import Mapping

from rtd.errors import Code, RtdError
from rtd.loader import layout
from rtd.loader.archive import read_archive
from rtd.loader.directory import read_directory
from rtd.loader.fileset import FileSet
from rtd.loader.sealed import seal_bytes

ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")


def _read_mapping(source: Mapping, files: FileSet) -> None:
    for path in sorted(source, key=str):
        parts = layout.split_relpath(path)
        data = source[path]
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise RtdError(Code.E_REQUEST_INVALID, f"{path!r} is not bytes")
        cap, code = files.admit(parts, len(data))
        files.add(parts, seal_bytes("/".join(parts), data, cap, code))


def read_package(source, limits: layout.IntakeLimits = layout.IntakeLimits()) -> FileSet:
    """Read `source` into a FileSet of sealed memfds, or raise RtdError leaving nothing open."""
    if isinstance(source, Mapping):
        files, reader = FileSet(limits, Code.E_ONNX_LIMIT), _read_mapping
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
    except BaseException:
        files.close()
        raise
    return files
