"""The package layout: which names may appear where, and the caps on each file.

A package is one Triton model directory holding exactly one numeric version directory:

    <name>/config.pbtxt                  optional Triton config (its digest is signed in metadata.json)
    <name>/<N>/model.onnx                the model
    <name>/<N>/metadata.json             signed facts: name, version, counter == N, expiry, ...
    <name>/<N>/<sibling>                 optional external-data files, each listed in the manifest
    <name>/<N>/checksum.sha256           sha256sum manifest of every file in <N>/ except itself and the signature
    <name>/<N>/checksum.sha256.sig       RSA-PSS signature envelope over the manifest bytes

Every path is checked here as text before anything is opened, so an unsafe name is refused
with E_PATH_UNSAFE no matter which intake (directory, archive, upload) carried it.
"""
import dataclasses
import re

from rtd.errors import Code, RtdError

CONFIG = "config.pbtxt"
MODEL = "model.onnx"
METADATA = "metadata.json"
MANIFEST = "checksum.sha256"
SIGNATURE = "checksum.sha256.sig"
UNSIGNED = frozenset({MANIFEST, SIGNATURE})  # the only version-dir files the manifest does not list

_COMPONENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
_VERSION_DIR = re.compile(r"[1-9][0-9]{0,17}")


@dataclasses.dataclass(frozen=True)
class IntakeLimits:
    """Caps applied while reading a package, before any digest is trusted."""
    max_files: int = 64
    max_file_bytes: int = 1536 << 20      # model.onnx and external-data siblings (E_ONNX_LIMIT)
    max_total_bytes: int = 3 << 30
    max_compression_ratio: int = 200      # archive: uncompressed bytes / compressed bytes read so far
    max_archive_members: int = 256        # every tar member counted, refused or not


# The small documents' caps, refused with their own parser's code whichever intake read them.
SMALL_CAPS = {
    CONFIG: (1 << 20, Code.E_CONFIG_INVALID),
    METADATA: (1 << 20, Code.E_METADATA_INVALID),
    MANIFEST: (64 << 10, Code.E_MANIFEST_INVALID),
    SIGNATURE: (16 << 10, Code.E_SIG_INVALID),
}


def is_component(name) -> bool:
    """One path component: clean UTF-8 text from a short allow-listed alphabet, not '.' or '..'."""
    return isinstance(name, str) and bool(_COMPONENT.fullmatch(name)) and name not in (".", "..")


def check_component(name) -> str:
    if not is_component(name):
        raise RtdError(Code.E_PATH_UNSAFE, f"unsafe name {name!r}")
    return name


def split_relpath(path) -> tuple[str, ...]:
    """A relative POSIX path as checked components; refuses absolute, empty, '..', '//', NUL, non-UTF-8."""
    if isinstance(path, bytes):
        try:
            path = path.decode("utf-8", "strict")
        except UnicodeDecodeError:
            raise RtdError(Code.E_PATH_UNSAFE, f"path {path!r} is not UTF-8") from None
    if not isinstance(path, str) or not path:
        raise RtdError(Code.E_PATH_UNSAFE, f"unsafe path {path!r}")
    return tuple(check_component(c) for c in path.split("/"))


def is_version_dir(name: str) -> bool:
    return bool(_VERSION_DIR.fullmatch(name))


def classify(parts: tuple[str, ...]) -> str | None:
    """The version directory a model-dir-relative path belongs to, '' for config.pbtxt; refuses the rest."""
    if parts == (CONFIG,):
        return ""
    if len(parts) == 2 and is_version_dir(parts[0]):
        return parts[0]
    raise RtdError(Code.E_FILE_UNLISTED, f"{'/'.join(parts)!r} is not part of the package layout")


def size_cap(parts: tuple[str, ...], limits: IntakeLimits) -> tuple[int, Code]:
    """The most bytes a file at this path may hold, and the code that refuses more."""
    return SMALL_CAPS.get(parts[-1], (limits.max_file_bytes, Code.E_ONNX_LIMIT))
