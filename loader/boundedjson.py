"""Strict, bounded JSON decoding for the small signed documents (metadata, signature envelope).

Python's json module accepts duplicate keys (last wins), NaN/Infinity, unbounded nesting (a
RecursionError) and any size; each of those is refused here, with the caller's error code.
"""
import json

from rtd.errors import Code, RtdError


class _Refused(ValueError):
    """What the document breaks, in this module's words (a refusal never quotes the document)."""


def _no_constants(name):
    raise _Refused("NaN and Infinity are not JSON")


def _unique(pairs):
    obj = {}
    for key, value in pairs:
        if key in obj:
            raise _Refused("a key appears twice in one object")
        obj[key] = value
    return obj


def _nesting_depth(text: str) -> int:
    """Deepest bracket nesting outside strings, computed without recursion before json sees the text."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def loads(data, *, code: Code, max_bytes: int, max_depth: int, what: str) -> dict:
    """Decode one JSON object from UTF-8 bytes, or raise RtdError(code)."""
    if len(data) > max_bytes:
        raise RtdError(code, f"{what} is {len(data)} bytes, over the {max_bytes}-byte cap")
    try:
        text = bytes(data).decode("utf-8", "strict")
    except UnicodeDecodeError as e:
        raise RtdError(code, f"{what} is not UTF-8 ({e.reason} at byte {e.start})") from None
    if _nesting_depth(text) > max_depth:
        raise RtdError(code, f"{what} nests deeper than {max_depth}")
    try:
        obj = json.loads(text, object_pairs_hook=_unique, parse_constant=_no_constants)
    except json.JSONDecodeError as e:   # its msg is the grammar's expectation, never the text found
        raise RtdError(code, f"{what} line {e.lineno} column {e.colno}: {e.msg}") from None
    except _Refused as e:
        raise RtdError(code, f"{what}: {e}") from None
    if not isinstance(obj, dict):
        raise RtdError(code, f"{what} is not a JSON object")
    return obj


def dumps(obj: dict) -> bytes:
    """The canonical form this project writes: sorted keys, two-space indent, trailing newline."""
    return (json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode()
