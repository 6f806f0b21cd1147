"""Producing signed packages: pack a model, or sign a Triton version directory in place.

Packages are assembled in memory as {model-dir-relative path: bytes} (`package_files`), then
written as a directory or one tar archive. The manifest and signature are computed over
exactly those bytes; the output is then checked with verify_package's own rules by callers
that want to (`rtctl pack` does).
"""
import datetime
import hashlib
import io
import os
import tarfile

from rtd.errors import Code, RtdError
from rtd.loader import layout, manifest, metadata, onnx_io, signing
from rtd.loader.intake import ARCHIVE_SUFFIXES
from rtd.served_shapes import served_dims

from rtd.loader.package import ENSEMBLE

# a config.pbtxt is read with protobuf (and its types through rtd.dtypes, NumPy's table): imported
# where one is read, so `rtctl pack` of a bare model loads neither

# ONNX's name of each KServe datatype where the two differ (the rest, BOOL and the integers, agree)
_ONNX_NAME = {"FP16": "FLOAT16", "FP32": "FLOAT", "FP64": "DOUBLE", "BF16": "BFLOAT16", "BYTES": "STRING"}


def graph_signature(model_bytes: bytes) -> tuple[list[dict], list[dict], dict[str, list]]:
    """The inputs and outputs of a model's graph as it is served, and the class labels of its
    ZipMap outputs (the operator's tooling reads them; the daemon never does). A ZipMap's output
    is served as FLOAT [N, classes] (kernels/ops/op_ml_zip_map.py); an ai.onnx.ml classifier's
    or regressor's with its input's rows (rtd/served_shapes.py)."""
    graph = onnx_io.graph_io(memoryview(model_bytes))
    outputs = {v.name for v in graph.outputs}
    labels = {node.outputs[0]: node.labels for node in graph.nodes
              if node.labels is not None and node.outputs and node.outputs[0] in outputs}
    producers = {out: (node.domain, node.op_type, node.inputs) for node in graph.nodes for out in node.outputs if out}
    inputs = [v for v in graph.inputs if v.name not in graph.initializers]
    dims = {v.name: v.dims for v in inputs}

    def served(value) -> dict:
        if value.name in labels:
            return {"name": value.name, "dtype": "FLOAT", "shape": [None, len(labels[value.name])]}
        return {"name": value.name, "dtype": value.dtype, "shape": served_dims(value.name, value.dims, producers, dims)}
    return ([{"name": v.name, "dtype": v.dtype, "shape": v.dims} for v in inputs], [served(v) for v in graph.outputs],
            labels)


def external_files(model_bytes: bytes, model_dir: str) -> dict[str, bytes]:
    """The files the model's tensors keep their data in (onnx's external data), read from
    `model_dir` to travel signed beside the model: each must be a plain name in that directory."""
    found = {}
    for name in sorted(onnx_io.external_locations(memoryview(model_bytes))):
        layout.check_component(name)   # no path: the file sits beside the model, and beside it in the package
        try:
            with open(os.path.join(model_dir, name), "rb") as f:
                found[name] = f.read()
        except FileNotFoundError:
            raise RtdError(Code.E_FILE_MISSING, f"external data file {name!r} is not beside the model in {model_dir}") from None
    return found


def build_metadata(model_bytes: bytes, *, name: str, version: str, counter: int,
                   expires: str | None = None, config_bytes: bytes | None = None,
                   created: datetime.datetime | None = None, signature: tuple | None = None,
                   **optional) -> dict:
    """metadata.json content; `signature` = (inputs, outputs, class labels), read from the model when None."""
    inputs, outputs, labels = signature if signature is not None else graph_signature(model_bytes)
    meta = {
        "format": metadata.FORMAT, "name": name, "version": version, "counter": counter,
        "created": metadata.timestamp(created or datetime.datetime.now(datetime.timezone.utc)),
        "inputs": inputs,
        "outputs": outputs,
        "config_sha256": hashlib.sha256(config_bytes).hexdigest() if config_bytes is not None else None,
        **({"class_labels": labels} if labels else {}),
        **{k: v for k, v in optional.items() if v is not None},
    }
    if expires is not None:
        meta["expires"] = expires
    return metadata.validate(meta)


def sign_files(files: dict[str, bytes], private_key) -> dict[str, bytes]:
    """Add (or replace) the manifest and signature of the one version directory in `files`."""
    versions = {p.split("/")[0] for p in files if "/" in p}
    if len(versions) != 1:
        raise RtdError(Code.E_FILE_MISSING, f"expected one version directory, found {sorted(versions)}")
    version = versions.pop()
    digests = {p.split("/", 1)[1]: hashlib.sha256(data).hexdigest() for p, data in files.items()
               if p.startswith(version + "/") and p.split("/", 1)[1] not in layout.UNSIGNED}
    manifest_bytes = manifest.render(digests)
    signed = dict(files)
    signed[f"{version}/{layout.MANIFEST}"] = manifest_bytes
    signed[f"{version}/{layout.SIGNATURE}"] = signing.sign(private_key, manifest_bytes)
    return signed


def package_files(model_bytes: bytes, *, name: str, version: str, private_key, counter: int = 1,
                  expires: str | None = None, config_bytes: bytes | None = None,
                  siblings: dict[str, bytes] | None = None, **optional) -> dict[str, bytes]:
    """A complete signed package as {path: bytes}."""
    layout.check_component(name)
    meta = build_metadata(model_bytes, name=name, version=version, counter=counter, expires=expires,
                          config_bytes=config_bytes, **optional)
    files = {f"{counter}/{layout.MODEL}": model_bytes, f"{counter}/{layout.METADATA}": metadata.render(meta)}
    for sibling, data in (siblings or {}).items():
        files[f"{counter}/{layout.check_component(sibling)}"] = data
    if config_bytes is not None:
        files[layout.CONFIG] = config_bytes
    return sign_files(files, private_key)


def config_signature(config) -> tuple[list[dict], list[dict], dict]:
    """The inputs and outputs a config.pbtxt declares (an ensemble's, which has no graph), as
    metadata.json states them: ONNX type names, -1 dims unknown, the batch dim first where
    max_batch_size > 0."""
    from rtd import dtypes
    from rtd.proto import model_config_pb2 as model_config
    batch = [None] if config.max_batch_size > 0 else []

    def side(tensors):
        out = []
        for t in tensors:
            row = dtypes.BY_CONFIG.get(model_config.DataType.Name(t.data_type))
            if row is None:
                raise RtdError(Code.E_CONFIG_INVALID, f"tensor {t.name!r}: data_type {model_config.DataType.Name(t.data_type)}")
            onnx_type = _ONNX_NAME.get(row.kserve, row.kserve)
            out.append({"name": t.name, "dtype": onnx_type, "shape": batch + [d if d >= 0 else None for d in t.dims]})
        return out
    return side(config.input), side(config.output), {}


STAGES_PARAMETER = "rtd_stages"   # config.pbtxt parameter: serve the model cut into this many pipeline stages


def with_stages(config_bytes: bytes | None, stages: int) -> bytes:
    """A config.pbtxt asking for `stages` pipeline stages (the given one, or a new one)."""
    from google.protobuf import text_format

    from rtd.loader.config import decode, parse_config
    from rtd.proto import model_config_pb2 as model_config
    config = parse_config(decode(config_bytes)) if config_bytes is not None else model_config.ModelConfig()
    if config.platform == ENSEMBLE:
        raise RtdError(Code.E_CONFIG_INVALID, "an ensemble is not cut into stages: its steps are models")
    config.parameters[STAGES_PARAMETER].string_value = str(stages)
    return text_format.MessageToString(config).encode()


def ensemble_files(config_bytes: bytes, *, name: str, version: str, private_key, counter: int = 1,
                   expires: str | None = None, **optional) -> dict[str, bytes]:
    """A complete signed ensemble package as {path: bytes}: config.pbtxt (platform "ensemble")
    and the version directory's metadata, no model (Triton's ensembles have none)."""
    from rtd.loader.config import decode, parse_config
    layout.check_component(name)
    config = parse_config(decode(config_bytes))
    if config.platform != ENSEMBLE or not config.ensemble_scheduling.step:
        raise RtdError(Code.E_CONFIG_INVALID, 'an ensemble\'s config.pbtxt has platform "ensemble" and ensemble_scheduling steps')
    meta = build_metadata(b"", name=name, version=version, counter=counter, expires=expires, config_bytes=config_bytes,
                          signature=config_signature(config), **optional)
    files = {f"{counter}/{layout.METADATA}": metadata.render(meta), layout.CONFIG: config_bytes}
    return sign_files(files, private_key)


def write_directory(files: dict[str, bytes], out: str) -> None:
    """Write a package as model directory `out` (which must not exist yet)."""
    os.makedirs(out)
    for path, data in sorted(files.items()):
        target = os.path.join(out, *layout.split_relpath(path))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "xb") as f:
            f.write(data)


def write_archive(files: dict[str, bytes], out: str, top: str) -> None:
    """Write a package as one tar (gzip when `out` ends in .gz/.tgz) with members under `top/`."""
    mode = "w:gz" if out.endswith((".gz", ".tgz")) else "w"
    with tarfile.open(out, mode, format=tarfile.PAX_FORMAT) as tar:
        for directory in sorted({top} | {f"{top}/{p.split('/')[0]}" for p in files if "/" in p}):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for path, data in sorted(files.items()):
            info = tarfile.TarInfo(f"{top}/{path}")
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))


def write_package(files: dict[str, bytes], out: str, name: str) -> None:
    if os.path.lexists(out):
        raise RtdError(Code.E_REQUEST_INVALID, f"{out} already exists; packages are never overwritten")
    if out.endswith(ARCHIVE_SUFFIXES):
        write_archive(files, out, name)
    else:
        write_directory(files, out)


def _read_regular(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def sign_version_dir(version_dir: str, private_key, *, name: str | None = None, version: str | None = None,
                     expires: str | None = None) -> dict:
    """Sign a Triton-layout version directory in place: write metadata.json when it is absent
    (name defaults to the parent directory's, version to N.0.0, counter to N), then the manifest
    and signature over every file in it. Returns the metadata."""
    version_dir = os.path.normpath(version_dir)
    counter_text = os.path.basename(version_dir)
    if not layout.is_version_dir(counter_text):
        raise RtdError(Code.E_BINDING_MISMATCH, f"{counter_text!r} is not a numeric version directory")
    parent = os.path.dirname(os.path.abspath(version_dir))
    config_path = os.path.join(parent, layout.CONFIG)
    config_bytes = _read_regular(config_path) if os.path.exists(config_path) else None
    files = {f"{counter_text}/{entry}": _read_regular(os.path.join(version_dir, entry))
             for entry in sorted(os.listdir(version_dir)) if entry not in layout.UNSIGNED}
    meta_path = f"{counter_text}/{layout.METADATA}"
    if meta_path in files:   # kept as written; refuse now what verification would refuse later
        meta = metadata.parse(files[meta_path])
        if meta["counter"] != int(counter_text):
            raise RtdError(Code.E_BINDING_MISMATCH, f"metadata counter {meta['counter']} in directory {counter_text}")
        if meta["config_sha256"] != (hashlib.sha256(config_bytes).hexdigest() if config_bytes is not None else None):
            raise RtdError(Code.E_DIGEST_MISMATCH, "metadata.json binds a different config.pbtxt")
    else:
        from rtd.loader.config import decode, parse_config
        config = parse_config(decode(config_bytes)) if config_bytes is not None else None
        ensemble = config is not None and config.platform == ENSEMBLE   # its signature is its config's: no graph
        meta = build_metadata(b"" if ensemble else files[f"{counter_text}/{layout.MODEL}"],
                              name=name or os.path.basename(parent), version=version or f"{counter_text}.0.0",
                              counter=int(counter_text), expires=expires, config_bytes=config_bytes,
                              signature=config_signature(config) if ensemble else None)
        files[meta_path] = metadata.render(meta)
    if config_bytes is not None:
        files[layout.CONFIG] = config_bytes
    signed = sign_files(files, private_key)
    for entry in (layout.METADATA, layout.MANIFEST, layout.SIGNATURE):
        data = signed[f"{counter_text}/{entry}"]
        tmp = os.path.join(version_dir, f".{entry}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, os.path.join(version_dir, entry))
    return meta
