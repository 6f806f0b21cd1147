"""Bounded JSON documents from a peer (REST bodies, inference headers): counted before they are
parsed, so a body of many small values is refused unparsed, and read field by field with
each field's type checked — one rule for the REST front and the worker that decodes requests."""
import json

from rtd.errors import Code, RtdError


def _bad(detail: str) -> RtdError:
    return RtdError(Code.E_REQUEST_INVALID, detail)


def values_in(data: bytes) -> int:
    """An upper bound of the values a JSON text holds: every value but the first takes a `,`, `[` or `{`."""
    return data.count(b",") + data.count(b"[") + data.count(b"{")


def parse(data, what: str, max_values: int | None = None) -> dict:
    """A JSON object of at most `max_values` values (E_MESSAGE_TOO_LARGE past it, unparsed;
    None: the caller counted them); empty is an empty object; anything else E_REQUEST_INVALID
    naming `what`."""
    data = bytes(data)
    if not data or data.isspace():
        return {}
    if max_values is not None and values_in(data) > max_values:
        raise RtdError(Code.E_MESSAGE_TOO_LARGE, f"{what} holds more than {max_values} JSON values "
                                                 "(send tensors with the binary tensor extension)")
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):   # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise _bad(f"{what} is not JSON") from None
    if not isinstance(doc, dict):
        raise _bad(f"{what} is not a JSON object")
    return doc


def field(doc: dict, key: str, kind, where: str, default=None):
    """doc[key] of `kind` (bool is no int here), `default` when absent, required when None."""
    if key not in doc:
        if default is None:
            raise _bad(f"{where}.{key}: required")
        return default
    value = doc[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise _bad(f"{where}.{key}: expected {kind.__name__}")
    return value
