"""verify_package: from an untrusted source to a VerifiedPackage, or a refusal that changes nothing.

Order of checks (each refusal names its code; see rtd.errors):
  intake (paths, links, special files, caps) -> exactly one version directory -> manifest
  -> exact file set -> digests -> signature envelope -> tenant's key (untrusted / revoked)
  -> signature -> metadata.json -> bindings (counter == version directory, name == model
  directory / expected name / config name, config digest) -> min rtd version -> expiry
  -> rollback high-water mark -> model content is not pickle/zip.
Every byte checked is the byte held: files are read once into sealed memfds and hashed while
read; the VerifiedPackage carries those memfds. The rollback store is only read here; the
caller records the counter after the model is really loaded.
"""
import dataclasses
import datetime
from collections.abc import Mapping

import rtd
from rtd.errors import Code, RtdError
from rtd.loader import formats, keys, layout, manifest, metadata, signing
from rtd.loader.intake import read_package
from rtd.loader.sealed import SealedFile
from rtd.loader.trust import RollbackStore, TrustStore

ENSEMBLE = "ensemble"   # config.pbtxt's platform for Triton's ensembles
VerifiedFile = SealedFile   # a SealedFile whose digest the signed manifest vouched for


@dataclasses.dataclass
class VerifiedPackage:
    name: str
    version: str
    version_dir: str
    counter: int
    metadata: dict
    key_fingerprint: str
    manifest_sha256: str
    files: Mapping[str, VerifiedFile]        # model-dir-relative path -> bytes ("1/model.onnx", "config.pbtxt")
    config_text: str | None
    config: object | None                    # rtd.proto.model_config_pb2.ModelConfig

    @property
    def is_ensemble(self) -> bool:
        """A Triton ensemble: its config names steps over the tenant's other models, no model.onnx."""
        return self.config is not None and self.config.platform == ENSEMBLE

    @property
    def model(self) -> VerifiedFile:
        return self.files[f"{self.version_dir}/{layout.MODEL}"]

    @property
    def siblings(self) -> dict[str, VerifiedFile]:
        """Signed version-directory files other than the model and metadata (external-data candidates)."""
        skip = {layout.MODEL, layout.METADATA} | layout.UNSIGNED
        prefix = self.version_dir + "/"
        return {p[len(prefix):]: f for p, f in self.files.items()
                if p.startswith(prefix) and p[len(prefix):] not in skip}

    def close(self) -> None:
        for f in self.files.values():
            f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _one_version_dir(paths) -> str:
    versions = {p.split("/")[0] for p in paths if "/" in p}
    if not versions:
        raise RtdError(Code.E_FILE_MISSING, "no version directory")
    if len(versions) > 1:
        raise RtdError(Code.E_FILE_UNLISTED, f"more than one version directory: {sorted(versions)}")
    return versions.pop()


def _check_file_set(files: Mapping[str, SealedFile], version: str, entries: dict[str, str]) -> None:
    present = {p.split("/", 1)[1] for p in files if p.startswith(version + "/")} - layout.UNSIGNED
    if unlisted := present - set(entries):
        raise RtdError(Code.E_FILE_UNLISTED, ", ".join(sorted(unlisted)))
    if missing := set(entries) - present:
        raise RtdError(Code.E_FILE_MISSING, ", ".join(sorted(missing)))
    for name, digest in entries.items():
        if files[f"{version}/{name}"].sha256 != digest:
            raise RtdError(Code.E_DIGEST_MISMATCH, name)


def _check_signature(files, version: str, trust: TrustStore) -> tuple[str, str]:
    manifest_file = files[f"{version}/{layout.MANIFEST}"]
    signature_path = f"{version}/{layout.SIGNATURE}"
    if signature_path not in files:
        raise RtdError(Code.E_SIG_MISSING, f"{signature_path} is absent")
    envelope = signing.read_envelope(files[signature_path].data)
    public_key = trust.key_for(envelope.key)
    keys.check_public(public_key)
    if envelope.manifest_sha256 != manifest_file.sha256:
        raise RtdError(Code.E_DIGEST_MISMATCH, "checksum.sha256 changed after it was signed")
    signing.verify(public_key, manifest_file.bytes(), envelope.signature)
    return envelope.key, manifest_file.sha256


def _check_bindings(meta: dict, version: str, files, model_dir_name, expected_name):
    if meta["counter"] != int(version):
        raise RtdError(Code.E_BINDING_MISMATCH, f"signed counter {meta['counter']} sits in version directory {version}")
    for where, name in (("model directory", model_dir_name), ("requested model", expected_name)):
        if name is not None and name != meta["name"]:
            raise RtdError(Code.E_BINDING_MISMATCH, f"signed name {meta['name']!r}, {where} {name!r}")
    config_file = files.get(layout.CONFIG)
    if meta["config_sha256"] is None:
        if config_file is not None:
            raise RtdError(Code.E_FILE_UNLISTED, "config.pbtxt is present but not bound by metadata.json")
        return None, None
    if config_file is None:
        raise RtdError(Code.E_FILE_MISSING, "metadata.json binds a config.pbtxt that is absent")
    if config_file.sha256 != meta["config_sha256"]:
        raise RtdError(Code.E_DIGEST_MISMATCH, layout.CONFIG)
    from rtd.loader import config as model_config   # protobuf, for the packages that have a config.pbtxt only
    text = model_config.decode(config_file.data)
    parsed = model_config.parse_config(text)
    if parsed.name and parsed.name != meta["name"]:
        raise RtdError(Code.E_BINDING_MISMATCH, f"config.pbtxt names {parsed.name!r}, signed name {meta['name']!r}")
    return text, parsed


def _check_freshness(meta: dict, now: datetime.datetime | None) -> None:
    if "min_rtd_version" in meta and metadata.semver_key(meta["min_rtd_version"]) > metadata.semver_key(rtd.__version__):
        raise RtdError(Code.E_VERSION_UNSUPPORTED, f"needs rtd {meta['min_rtd_version']}, this is {rtd.__version__}")
    now = now or datetime.datetime.now(datetime.timezone.utc)
    if "expires" in meta and metadata.parse_timestamp(meta["expires"]) <= now:
        raise RtdError(Code.E_EXPIRED, f"expired {meta['expires']}")


def _check_model_file(files, version: str, entries: dict, config) -> None:
    """A model package holds model.onnx, refused by content if it is pickle or zip; an
    ensemble's (platform "ensemble", as Triton's) holds none: its steps are other models."""
    if config is not None and config.platform == ENSEMBLE:
        if layout.MODEL in entries:
            raise RtdError(Code.E_FILE_UNLISTED, "an ensemble package holds no model.onnx: its steps name the models")
        return
    if layout.MODEL not in entries:
        raise RtdError(Code.E_MANIFEST_INVALID, f"manifest does not list {layout.MODEL}")
    formats.refuse_unsafe(files[f"{version}/{layout.MODEL}"].data, layout.MODEL)


def verify_package(source, *, trust: TrustStore, tenant: str, rollback: RollbackStore | None,
                   allow_rollback: bool = False, expected_name: str | None = None,
                   now: datetime.datetime | None = None,
                   limits: layout.IntakeLimits = layout.IntakeLimits()) -> VerifiedPackage:
    """Verify a package for `tenant` (see the module docstring); raises RtdError, never mutates `rollback`."""
    fileset = read_package(source, limits)
    try:
        files = fileset.files
        version = _one_version_dir(files)
        manifest_path = f"{version}/{layout.MANIFEST}"
        if manifest_path not in files:
            raise RtdError(Code.E_FILE_MISSING, f"{manifest_path} is absent")
        entries = manifest.parse(files[manifest_path].data)
        _check_file_set(files, version, entries)
        fingerprint, manifest_sha256 = _check_signature(files, version, trust)
        meta = metadata.parse(files[f"{version}/{layout.METADATA}"].data)
        text, parsed = _check_bindings(meta, version, files, fileset.model_dir_name, expected_name)
        _check_freshness(meta, now)
        if rollback is not None:
            rollback.check(tenant, meta["name"], meta["counter"], manifest_sha256=manifest_sha256,
                           allow_rollback=allow_rollback)
        _check_model_file(files, version, entries, parsed)
    except BaseException:
        fileset.close()
        raise
    return VerifiedPackage(meta["name"], meta["version"], version, meta["counter"], meta, fingerprint,
                           manifest_sha256, dict(files), text, parsed)
