"""checksum.sha256: a `sha256sum`-format manifest, strictly parsed.

Exactly the text `sha256sum` writes in text mode and `sha256sum -c` checks: one line per file,
`<64 lowercase hex>  <name>\\n`, sorted by name (byte order), no duplicates, no blank lines,
no comments, no binary-mode `*` marker, no CR. Names are flat file names of the version
directory (checked by layout.check_component), so `sha256sum -c` run inside that directory
reads exactly the listed files.
"""
import re

from rtd.errors import Code, RtdError
from rtd.loader import layout

MAX_BYTES = layout.SMALL_CAPS[layout.MANIFEST][0]
_LINE = re.compile(rb"([0-9a-f]{64})  ([^\n\r]*)")


def render(digests: dict[str, str]) -> bytes:
    """Manifest bytes for {name: sha256 hex}."""
    for name in digests:
        layout.check_component(name)
    return b"".join(f"{digests[n]}  {n}\n".encode() for n in sorted(digests, key=str.encode))


def parse(data) -> dict[str, str]:
    """{name: sha256 hex} from manifest bytes, or RtdError(E_MANIFEST_INVALID / E_PATH_UNSAFE)."""
    data = bytes(data)
    if len(data) > MAX_BYTES:
        raise RtdError(Code.E_MANIFEST_INVALID, f"manifest is over {MAX_BYTES} bytes")
    if not data.endswith(b"\n"):
        raise RtdError(Code.E_MANIFEST_INVALID, "manifest is empty or lacks its final newline")
    entries: dict[str, str] = {}
    previous = None
    for number, line in enumerate(data[:-1].split(b"\n"), 1):
        match = _LINE.fullmatch(line)
        if not match:
            raise RtdError(Code.E_MANIFEST_INVALID, f"line {number} is not '<sha256>  <name>'")
        digest, raw_name = match.groups()
        try:
            name = raw_name.decode("utf-8", "strict")
        except UnicodeDecodeError:
            raise RtdError(Code.E_PATH_UNSAFE, f"manifest line {number}: name is not UTF-8") from None
        if "/" in name or not layout.is_component(name):   # the manifest is not yet verified: never quoted
            raise RtdError(Code.E_PATH_UNSAFE, f"manifest line {number}: the name is not a plain file name")
        if name in layout.UNSIGNED:
            raise RtdError(Code.E_MANIFEST_INVALID, f"manifest lists {name}, which it cannot cover")
        if previous is not None and raw_name <= previous:
            raise RtdError(Code.E_MANIFEST_INVALID, f"line {number}: names are not sorted and unique")
        previous = raw_name
        entries[name] = digest.decode()
    for required in (layout.MODEL, layout.METADATA):
        if required not in entries:
            raise RtdError(Code.E_MANIFEST_INVALID, f"manifest does not list {required}")
    return entries
