"""A tenant's server-side model repository, in Triton's layout: `DIR/<model>/config.pbtxt` and
`DIR/<model>/<N>/` holding a signed package (the same files an upload carries).

This module only finds things: which models the directory holds and which version of one to
serve. The package is then read and verified by the loader exactly as an upload is (intake
beneath a directory fd, manifest, signature, rollback), so a repository is no more trusted
than a client. Triton's explicit model-control mode: nothing loads until asked (or listed in
the tenant's `load`), and the version served is the one config.pbtxt's version_policy picks:
the highest numbered (Triton's default, `latest { num_versions: 1 }`) or `specific` with one
version. rtd serves one version per model name, so a policy naming more is refused. The
config read here only chooses which directory to verify; verification binds that very
config to the version (its digest is in the signed metadata) and the choice is checked again.
"""
import errno
import os
import stat

from rtd.errors import Code, RtdError
from rtd.loader import layout
from rtd.loader.config import MAX_BYTES, decode, parse_config


def _version_dirs(model_dir: str) -> list[str]:
    try:
        names = os.listdir(model_dir)
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            raise RtdError(Code.E_MODEL_NOT_FOUND, f"{os.path.basename(model_dir)!r} is not in the model repository") from None
        raise RtdError(Code.E_FILE_MISSING, f"{model_dir}: {e.strerror}") from None
    return [n for n in names if layout.is_version_dir(n)]


def _config(model_dir: str):
    try:
        with open(os.path.join(model_dir, layout.CONFIG), "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    if len(data) > MAX_BYTES:
        raise RtdError(Code.E_CONFIG_INVALID, f"{layout.CONFIG} is over {MAX_BYTES} bytes")
    return parse_config(decode(data))


def _chosen(config, versions: list[str]) -> str:
    """The version directory the config's version_policy picks among `versions`."""
    policy = config.version_policy if config is not None and config.HasField("version_policy") else None
    which = policy.WhichOneof("policy_choice") if policy is not None else "latest"
    if which == "latest" and (policy is None or policy.latest.num_versions <= 1):
        return max(versions, key=int)
    if which == "specific" and len(policy.specific.versions) == 1:
        wanted = str(policy.specific.versions[0])
        if wanted not in versions:
            raise RtdError(Code.E_FILE_MISSING, f"version_policy specific names version {wanted}, which is not there")
        return wanted
    raise RtdError(Code.E_CONFIG_INVALID, f"version_policy {which} with more than one version: rtd serves one "
                                          "version per model (latest { num_versions: 1 } or specific { versions: [N] })")


def repository_version(repository: str, name: str) -> str:
    """The version directory of model `name` to serve, as its config's version_policy says."""
    model_dir = os.path.join(repository, layout.check_component(name))
    versions = _version_dirs(model_dir)
    if not versions:
        raise RtdError(Code.E_FILE_MISSING, f"{name}: no numbered version directory in the model repository")
    return os.path.join(model_dir, _chosen(_config(model_dir), versions))


def package_size(version_dir: str) -> int:
    """Bytes the package at `version_dir` will take once read (its files and ../config.pbtxt),
    charged before reading; intake's own caps still bound what is actually read."""
    try:
        listing = os.listdir(version_dir)
    except OSError as e:
        raise RtdError(Code.E_FILE_MISSING, f"{version_dir}: {e.strerror}") from None
    size = 0
    for directory, names in ((version_dir, listing), (os.path.dirname(version_dir), (layout.CONFIG,))):
        for name in names:
            try:
                st = os.stat(os.path.join(directory, name), follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode):
                size += st.st_size
    return size


def check_version_policy(config, version_dir: str) -> None:
    """After verification: the signed config's policy picks the version that was verified
    (the repository could have changed between the choice and the reading)."""
    model_dir = os.path.dirname(version_dir)
    if _chosen(config, _version_dirs(model_dir)) != os.path.basename(version_dir):
        raise RtdError(Code.E_CONFIG_INVALID, f"the repository changed while {os.path.basename(model_dir)} loaded: load it again")


def repository_models(repository: str) -> list[tuple[str, str]]:
    """(model name, its latest version) for every model directory with a numbered version."""
    try:
        names = sorted(os.listdir(repository))
    except OSError:
        return []
    found = []
    for name in names:
        try:
            found.append((name, os.path.basename(repository_version(repository, name))))
        except RtdError:
            continue
    return found
