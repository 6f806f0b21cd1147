"""metadata.json: the signed facts about one package version, strictly validated.

Schema (every key below; no others):
  format            "rtd.package/v1"
  name              model name (a layout component)           -- bound to the model directory
  version           semantic version "X.Y.Z[-pre][+build]"
  counter           monotonic integer >= 1, == the version directory's number (Triton version)
  created           RFC 3339 UTC timestamp "YYYY-MM-DDTHH:MM:SSZ"
  expires           optional, same form; a package past it is refused (E_EXPIRED)
  inputs, outputs   [{"name": str, "dtype": str, "shape": [int >= 0 | str | null, ...]}, ...]
                    at most 64 dims: a size (0 included), a symbolic name of at most
                    MAX_DIM_NAME characters, or null for a dim the model leaves unknown
  class_labels      optional {output name: [label, ...]} (str or int labels): for an output a ZipMap
                    makes, served as FLOAT [N, classes], the class of each column (written by `rtctl pack`)
  training_fingerprint, data_fingerprint   optional strings (provenance, informational)
  min_rtd_version   optional semantic version; a newer one than this rtd is refused
  config_sha256     SHA-256 hex of ../config.pbtxt, or null when the package has none.
                    config.pbtxt sits one level above the version directory, where the
                    sha256sum manifest cannot name it without '..'; binding its digest here
                    puts it under the signature while `sha256sum -c` still works in place.
"""
import datetime
import re

from rtd.errors import Code, RtdError
from rtd.loader import boundedjson, layout

FORMAT = "rtd.package/v1"
MAX_BYTES = layout.SMALL_CAPS[layout.METADATA][0]
MAX_DEPTH = 8
MAX_TENSORS = 1024
MAX_DIMS = 64
MAX_DIM_NAME = 4096   # exporters name output dims by whole expressions; the file's cap bounds the sum
# ASCII digits only (\d takes any script's), numeric parts bounded (int() refuses 4300+ digits)
_NUMBER = r"(?:0|[1-9][0-9]{0,17})"
_SEMVER = re.compile(
    rf"({_NUMBER})\.({_NUMBER})\.({_NUMBER})"
    rf"(?:-((?:{_NUMBER}|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:{_NUMBER}|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?")
_TIMESTAMP = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_REQUIRED = {"format", "name", "version", "counter", "created", "inputs", "outputs", "config_sha256"}
_OPTIONAL = {"expires", "training_fingerprint", "data_fingerprint", "min_rtd_version", "class_labels"}
MAX_LABELS = 1 << 16


def _fail(detail: str):
    raise RtdError(Code.E_METADATA_INVALID, detail)


def semver_key(text: str) -> tuple:
    """Ordering key by semver precedence of the core and the pre-release flag."""
    match = _SEMVER.fullmatch(text) if isinstance(text, str) else None
    if not match:
        _fail(f"{text!r} is not a semantic version")
    major, minor, patch, pre, _build = match.groups()
    return int(major), int(minor), int(patch), pre is None


def parse_timestamp(text) -> datetime.datetime:
    if not isinstance(text, str) or not _TIMESTAMP.fullmatch(text):
        _fail(f"{text!r} is not a UTC timestamp YYYY-MM-DDTHH:MM:SSZ")
    try:
        return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        _fail(f"{text!r} is not a real date")


def timestamp(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _short_text(value, key: str) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= 256:
        _fail(f"{key} must be a string of 1..256 characters")
    return value


def _tensors(value, key: str) -> None:
    if not isinstance(value, list) or len(value) > MAX_TENSORS:
        _fail(f"{key} must be a list of at most {MAX_TENSORS} tensors")
    for item in value:
        if not isinstance(item, dict) or set(item) != {"name", "dtype", "shape"}:
            _fail(f"each of {key} is {{name, dtype, shape}}")
        _short_text(item["name"], f"{key}.name")
        _short_text(item["dtype"], f"{key}.dtype")
        shape = item["shape"]
        if not isinstance(shape, list) or len(shape) > MAX_DIMS or not all(
                d is None or (isinstance(d, str) and len(d) <= MAX_DIM_NAME)
                or (type(d) is int and 0 <= d < 2 ** 63) for d in shape):
            _fail(f"{key} {item['name']!r}: shape must list at most {MAX_DIMS} dims, each a size >= 0, "
                  f"a name of at most {MAX_DIM_NAME} characters or null")


def _class_labels(value, outputs: list) -> None:
    names = {item["name"] for item in outputs}
    if not isinstance(value, dict) or not set(value) <= names:
        _fail("class_labels must map output names to label lists")
    for labels in value.values():
        if not isinstance(labels, list) or len(labels) > MAX_LABELS or not all(
                (isinstance(v, str) and len(v) <= 256) or (type(v) is int and -2 ** 63 <= v < 2 ** 63) for v in labels):
            _fail(f"each class_labels entry lists at most {MAX_LABELS} labels, strings of up to 256 characters or int64s")


def validate(meta: dict) -> dict:
    """The same dict, or RtdError(E_METADATA_INVALID) naming the first problem."""
    keys = set(meta)
    if not _REQUIRED <= keys or not keys <= _REQUIRED | _OPTIONAL:
        _fail(f"missing keys {sorted(_REQUIRED - keys)}, unknown keys {sorted(keys - _REQUIRED - _OPTIONAL)}")
    if meta["format"] != FORMAT:
        _fail(f"format must be {FORMAT!r}")
    try:
        layout.check_component(meta["name"])
    except RtdError:
        _fail(f"name {meta['name']!r} is not a safe model name")
    semver_key(meta["version"])
    counter = meta["counter"]
    if type(counter) is not int or not 1 <= counter < 10 ** 18:
        _fail("counter must be an integer in 1..10^18-1")
    created = parse_timestamp(meta["created"])
    if "expires" in meta and parse_timestamp(meta["expires"]) <= created:
        _fail("expires is not after created")
    _tensors(meta["inputs"], "inputs")
    _tensors(meta["outputs"], "outputs")
    if "class_labels" in meta:
        _class_labels(meta["class_labels"], meta["outputs"])
    for key in ("training_fingerprint", "data_fingerprint"):
        if key in meta:
            _short_text(meta[key], key)
    if "min_rtd_version" in meta:
        semver_key(meta["min_rtd_version"])
    digest = meta["config_sha256"]
    if digest is not None and not (isinstance(digest, str) and _HEX64.fullmatch(digest)):
        _fail("config_sha256 must be lowercase SHA-256 hex or null")
    return meta


def parse(data) -> dict:
    return validate(boundedjson.loads(data, code=Code.E_METADATA_INVALID, max_bytes=MAX_BYTES,
                                      max_depth=MAX_DEPTH, what="metadata.json"))


def render(meta: dict) -> bytes:
    data = boundedjson.dumps(validate(meta))
    if len(data) > MAX_BYTES:
        _fail(f"metadata.json would be {len(data)} bytes, over the {MAX_BYTES}-byte cap")
    return data
