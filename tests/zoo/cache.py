"""Exported models cached outside the repo (`~/.cache/rtd/zoo/`, or `$RTD_ZOO_CACHE`), never committed.

A file's name carries a hash of everything its export depends on (builder source, net source,
library versions), so editing a builder re-exports it and nothing else. Files are written to
a temporary name and renamed, so a concurrent or interrupted export never leaves a torn file.
"""
import hashlib
import os
import re
import tempfile
from collections.abc import Callable

CACHE_DIR = os.environ.get("RTD_ZOO_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "rtd", "zoo"))


def cached_model(name: str, build: Callable[[], bytes], key_parts: list[str]) -> str:
    """The path of `name`'s .onnx file, calling `build()` for its bytes only when not cached."""
    digest = hashlib.sha256("\0".join(key_parts).encode()).hexdigest()[:16]
    path = os.path.join(CACHE_DIR, f"{name}-{digest}.onnx")
    if os.path.exists(path):
        return path
    os.makedirs(CACHE_DIR, exist_ok=True)
    data = build()
    fd, tmp = tempfile.mkstemp(dir=CACHE_DIR, prefix=f".{name}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    _drop_stale(name, path)
    return path


def _drop_stale(name: str, keep: str) -> None:
    """Older exports of the same model (other hashes) are dead weight: hundreds of MB for BERT."""
    stale = re.compile(re.escape(name) + r"-[0-9a-f]{16}\.onnx")
    for entry in os.listdir(CACHE_DIR):
        if stale.fullmatch(entry) and os.path.join(CACHE_DIR, entry) != keep:
            os.unlink(os.path.join(CACHE_DIR, entry))
