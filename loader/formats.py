"""Recognising unsafe serialisation formats by content, whatever the file is called.

Pickle (protocol 2+ starts with PROTO 0x80; protocols 0/1 start with a pickle opcode and end
with STOP '.'), zip containers (torch.save and zip-of-pickle: `PK\\x03\\x04`), and the
compressed wrappers joblib writes (zlib, gzip, bz2, xz, lz4) are refused outright with
E_FORMAT_FORBIDDEN: a deny-by-content check, never a scan of what the pickle would do, and
nothing is ever unpickled. Anything else is left for the ONNX parser to accept or refuse.
"""
from rtd.errors import Code, RtdError

_MAGICS = (
    (b"PK\x03\x04", "zip archive (torch.save / zip-of-pickle)"),
    (b"PK\x05\x06", "empty zip archive"),
    (b"\x1f\x8b", "gzip stream (joblib compressed pickle)"),
    (b"BZh", "bz2 stream (joblib compressed pickle)"),
    (b"\xfd7zXZ\x00", "xz stream (joblib compressed pickle)"),
    (b"\x04\x22\x4d\x18", "lz4 frame (joblib compressed pickle)"),
    (b"ZF", "joblib zlib container"),
)
_PROTOCOL0_OPENERS = frozenset(b"(cdl]}NIJKLMFSTUVX)")


def detect(data) -> str | None:
    """A description of the forbidden format `data` is in, or None."""
    head = bytes(data[:8])
    if len(head) >= 2 and head[0] == 0x80 and 1 <= head[1] <= 5:
        return f"pickle protocol {head[1]}"
    for magic, what in _MAGICS:
        if head.startswith(magic):
            return what
    if head[:1] == b"x" and len(head) >= 2 and (head[0] * 256 + head[1]) % 31 == 0:
        return "zlib stream (joblib compressed pickle)"
    if head and head[0] in _PROTOCOL0_OPENERS and bytes(data[-1:]) == b".":
        return "pickle protocol 0/1"
    return None


def refuse_unsafe(data, what: str) -> None:
    found = detect(data)
    if found:
        raise RtdError(Code.E_FORMAT_FORBIDDEN, f"{what} is a {found}")
