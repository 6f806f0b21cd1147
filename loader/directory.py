"""Reading a package directory: every file opened once, beneath the model directory, never by path.

The directory is an rtd.beneath.Dir, so this module keeps no opening rules of its own: each
entry is one path component checked by the layout, its kind read from the directory entry
(symlinks E_LINK_FORBIDDEN, FIFOs, sockets and devices E_SPECIAL_FILE, never opened), and
each file opened and checked by Dir.open_file (no link, one hard link, its size cap before a
byte is read). The bytes go straight into a sealed memfd (sealed.seal_from_fd).

The source is a model directory (config.pbtxt and numeric version directories), read whole,
or one version of it (`ModelDir(dir, version)`, as the model repository names it, or a path
to a version directory itself), read with the model directory's config.pbtxt.
"""
import dataclasses
import os

from rtd.beneath import Dir
from rtd.errors import Code, RtdError
from rtd.loader import layout
from rtd.loader.fileset import FileSet
from rtd.loader.sealed import seal_from_fd


@dataclasses.dataclass
class ModelDir:
    """An open model directory and the one version directory of it to read (None: every one it holds)."""
    dir: Dir
    version: str | None = None


def _read_file(model_dir: Dir, parts: tuple[str, ...], files: FileSet) -> None:
    layout.classify(parts)
    cap, code = layout.size_cap(parts, files.limits)
    with model_dir.open_file("/".join(parts), cap, code) as f:
        files.admit(parts, f.size)
        files.add(parts, seal_from_fd("/".join(parts), f.fd, f.size))


def refuse_kind_of(model_dir: Dir, rel: str, kind: str) -> None:
    """A directory entry that is no regular file is refused by what it is, before anything opens it."""
    if kind == "a symlink":
        raise RtdError(Code.E_LINK_FORBIDDEN, f"{model_dir.where(rel)} is a symlink")
    if kind != "a regular file":
        raise RtdError(Code.E_SPECIAL_FILE, f"{model_dir.where(rel)} is {kind}, not a regular file")


def _read_version_dir(model_dir: Dir, version: str, files: FileSet) -> None:
    for name, kind in model_dir.entries(version):
        parts = (version, layout.check_component(name))
        if kind == "a directory":
            raise RtdError(Code.E_FILE_UNLISTED, f"{'/'.join(parts)} is a directory")
        refuse_kind_of(model_dir, "/".join(parts), kind)
        _read_file(model_dir, parts, files)


def read_model_dir(source: ModelDir, files: FileSet) -> None:
    """Read an open model directory (one version of it, or all) into `files`."""
    model_dir, version = source.dir, source.version
    for name, kind in model_dir.entries():
        if version is not None and name not in (version, layout.CONFIG):
            continue   # another version, or what the repository keeps beside the package
        layout.check_component(name)
        if kind != "a directory":
            refuse_kind_of(model_dir, name, kind)
            _read_file(model_dir, (name,), files)
            continue
        layout.classify((name, layout.MODEL))   # only numeric version directories
        _read_version_dir(model_dir, name, files)
    if version is not None and not any(p.startswith(version + "/") for p in files.files):
        raise RtdError(Code.E_FILE_MISSING, f"{model_dir.where(version)} does not exist")


def read_directory(path: str, files: FileSet) -> None:
    """Read a model directory or a version directory (the operator's path) into `files`."""
    path = os.path.normpath(path)
    with Dir.open(path) as top:
        if not top.exists(layout.MANIFEST):
            read_model_dir(ModelDir(top), files)
            return
    version = os.path.basename(path)
    if not layout.is_version_dir(version):
        raise RtdError(Code.E_BINDING_MISMATCH, f"version directory {version!r} is not a number")
    with Dir.open(os.path.dirname(path)) as model_dir:
        read_model_dir(ModelDir(model_dir, version), files)
