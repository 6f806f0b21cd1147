"""A tenant's server-side model repository, in Triton's layout: `DIR/<model>/config.pbtxt` and
`DIR/<model>/<N>/` holding a signed package (the same files an upload carries).

This module only finds things: which models the directory holds and which version of one to
serve. The package is then read and verified by the loader exactly as an upload is (intake
beneath a directory fd, manifest, signature, rollback), so a repository is no more trusted
than a client. Triton's explicit model-control mode: nothing loads until asked (or listed in
the tenant's `load`), and the version served is the highest numbered one, Triton's default
version policy (`latest { num_versions: 1 }`); other policies are refused at load.
"""
import errno
import os
import stat

from rtd.errors import Code, RtdError
from rtd.loader import layout


def _version_dirs(model_dir: str) -> list[str]:
    try:
        names = os.listdir(model_dir)
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            raise RtdError(Code.E_MODEL_NOT_FOUND, f"{os.path.basename(model_dir)!r} is not in the model repository") from None
        raise RtdError(Code.E_FILE_MISSING, f"{model_dir}: {e.strerror}") from None
    return [n for n in names if layout.is_version_dir(n)]


def repository_version(repository: str, name: str) -> str:
    """The version directory of model `name` to serve: its highest numbered one."""
    model_dir = os.path.join(repository, layout.check_component(name))
    versions = _version_dirs(model_dir)
    if not versions:
        raise RtdError(Code.E_FILE_MISSING, f"{name}: no numbered version directory in the model repository")
    return os.path.join(model_dir, max(versions, key=int))


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


def check_version_policy(config) -> None:
    """Refuse a config.pbtxt whose version_policy asks for anything but the latest version."""
    if config is None or not config.HasField("version_policy"):
        return
    policy = config.version_policy
    which = policy.WhichOneof("policy_choice")
    if which == "latest" and policy.latest.num_versions <= 1:
        return
    raise RtdError(Code.E_CONFIG_INVALID, f"version_policy {which}: rtd serves one version per model, the latest "
                                          "(latest { num_versions: 1 }, Triton's default)")


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
