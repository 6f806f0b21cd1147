"""A tenant's server-side model repository, in Triton's layout: `DIR/<model>/config.pbtxt` and
`DIR/<model>/<N>/` holding a signed package (the same files an upload carries).

This module only finds things: which models the directory holds and which version of one to
serve. The repository is the tenant's and trusted no more than a client: its root is opened
once as a directory (rtd.beneath.Dir) and every model, version and file is opened beneath it,
never through a link, a mount point or `..`, and never a FIFO, socket or device; a config is
read within its cap and its parse errors never quote it. The package is then read and
verified by the loader exactly as an upload is (loader.directory reads the same Dir).
Triton's explicit model-control mode: nothing loads until asked (or listed in the tenant's
`load`), and the version served is the one config.pbtxt's version_policy picks: the highest
numbered (Triton's default, `latest { num_versions: 1 }`) or `specific` with one version. rtd
serves one version per model name, so a policy naming more is refused. The config read here
only chooses which directory to verify; verification binds that very config to the version
(its digest is in the signed metadata) and the choice is checked again.

Every call blocks on the tenant's files: the supervisor makes them on the tenant's own
threads (serving/tenant_io.py), each bounded in time.
"""
import threading

from rtd.beneath import Dir
from rtd.errors import Code, RtdError
from rtd.loader import layout
from rtd.loader.config import MAX_BYTES, decode, parse_config
from rtd.loader.directory import ModelDir

MAX_MODELS = 1024   # model directories one index lists


class Repository:
    """One tenant's model repository, its root opened once (again after it could not be)."""

    def __init__(self, path: str):
        self.path, self.label = path, "repository"   # how refusals name it: the host path is not the tenant's business
        self._root: Dir | None = None
        self._lock = threading.Lock()

    def root(self) -> Dir:
        with self._lock:
            if self._root is None:
                self._root = Dir.open(self.path, self.label)
            return self._root

    def close(self) -> None:
        with self._lock:
            if self._root is not None:
                self._root.close()
                self._root = None

    def open_model(self, name: str) -> Dir:
        layout.check_component(name)
        try:
            root = self.root()
        except RtdError as e:
            if e.code is not Code.E_FILE_MISSING:
                raise
            root = None   # not made yet: it holds nothing
        if root is None or not root.exists(name):
            raise RtdError(Code.E_MODEL_NOT_FOUND, f"{name!r} is not in the model repository")
        return root.subdir(name)

    def version(self, name: str) -> ModelDir:
        """Model `name`, open, and the version its config's version_policy picks (the caller closes `.dir`)."""
        model_dir = self.open_model(name)
        try:
            return ModelDir(model_dir, _chosen(_config(model_dir), _versions(model_dir)))
        except BaseException:
            model_dir.close()
            raise

    def models(self) -> list[dict]:
        """Every model directory, as the index lists it: {"name", "version"} when a version can be
        chosen, else {"name", "version": "", "reason": the refusal}; never more than MAX_MODELS."""
        found = []
        for name, kind in self.root().entries(limit=MAX_MODELS):
            if not layout.is_component(name):
                continue   # not a model name: nothing the tenant could ask for
            try:
                if kind != "a directory":
                    raise RtdError(Code.E_SPECIAL_FILE if kind != "a symlink" else Code.E_LINK_FORBIDDEN,
                                   f"{self.label}/{name} is {kind}, not a model directory")
                source = self.version(name)
                source.dir.close()
                found.append({"name": name, "version": source.version})
            except RtdError as e:
                found.append({"name": name, "version": "", "reason": str(e)})
        return found


def _versions(model_dir: Dir) -> list[str]:
    versions = [name for name, _ in model_dir.entries() if layout.is_version_dir(name)]
    if not versions:
        raise RtdError(Code.E_FILE_MISSING, f"{model_dir.label}: no numbered version directory")
    return versions


def _config(model_dir: Dir):
    if not model_dir.exists(layout.CONFIG):
        return None
    where = model_dir.where(layout.CONFIG)
    return parse_config(decode(model_dir.read(layout.CONFIG, MAX_BYTES, Code.E_CONFIG_INVALID), where), where)


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


def package_size(source: ModelDir) -> int:
    """Bytes the package at `source` will take once read (its files and config.pbtxt), charged
    before reading; intake's own caps still bound what is actually read."""
    size = 0
    for name, kind in source.dir.entries(source.version):
        if kind == "a regular file":
            size += source.dir.lstat(f"{source.version}/{name}").st_size
    if source.dir.exists(layout.CONFIG):
        size += source.dir.lstat(layout.CONFIG).st_size
    return size


def check_version_policy(config, source: ModelDir) -> None:
    """After verification: the signed config's policy picks the version that was verified
    (the repository could have changed between the choice and the reading)."""
    if _chosen(config, _versions(source.dir)) != source.version:
        raise RtdError(Code.E_CONFIG_INVALID, f"the repository changed while {source.dir.label} loaded: load it again")
