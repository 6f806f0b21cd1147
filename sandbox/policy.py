"""The worker policy: a typed schema parsed once from policies/default.toml plus
per-tenant overrides. Defaults protect; weakening switches are named disable_*/unsafe_*.
Every layer reads only the resulting frozen `Policy`."""
import dataclasses
import importlib.resources
import math
import os
import re
import tomllib

from rtd.errors import Code, RtdError

LAYERS = ("userns", "namespaces", "mounts", "memory", "pids", "cpu", "kill", "gpu",
          "rlimits", "privileges", "seccomp")
MIB = 1 << 20
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def is_name(value) -> bool:
    """Whether `value` may name a tenant or an rtd instance: 1-64 of [A-Za-z0-9_-] (it becomes
    a cgroup directory name, so nothing else: no dots, slashes or non-ASCII letters)."""
    return isinstance(value, str) and _NAME.fullmatch(value) is not None


@dataclasses.dataclass(frozen=True)
class Limits:
    memory_bytes: int
    pids: int
    cpu_cores: float
    cpu_weight: int
    gpu_memory_bytes: int
    gpu_devices: tuple[int, ...]
    scratch_bytes: int
    nofile: int
    fsize_bytes: int
    cpu_seconds: int


@dataclasses.dataclass(frozen=True)
class Policy:
    strict: bool
    mandatory: tuple[str, ...]
    cgroup_parent: str
    ro_binds: tuple[str, ...]
    disable_userns: bool
    unsafe_disable_seccomp: bool
    unsafe_gpu_audit: bool
    limits: Limits

    def to_dict(self) -> dict:
        """JSON-safe form; `Policy.from_dict(p.to_dict()) == p`."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Policy":
        return _build(data)


@dataclasses.dataclass(frozen=True)
class TenantIdentity:
    """Who a worker runs as: the tenant's own unprivileged uid/gid (no passwd entry needed)."""
    name: str
    uid: int
    gid: int

    def __post_init__(self):
        if not is_name(self.name):
            raise RtdError(Code.E_POLICY_INVALID, f"tenant name {self.name!r} must be 1-64 of [A-Za-z0-9_-]")
        for key in ("uid", "gid"):
            value = getattr(self, key)
            if type(value) is not int or not 1000 <= value < 2**31 - 1:
                raise RtdError(Code.E_POLICY_INVALID, f"tenant {key} {value!r} must be an int in [1000, 2^31-1)")


def _types_of(cls) -> dict:
    return {f.name: f.type for f in dataclasses.fields(cls)}


def _check_type(where: str, value, kind):
    if kind in ("float", float):
        ok = type(value) in (int, float) and math.isfinite(value)
    elif kind in ("bool", bool):
        ok = type(value) is bool
    elif kind in ("int", int):
        ok = type(value) is int
    elif kind in ("str", str):
        ok = type(value) is str
    elif kind == tuple[int, ...]:
        ok = isinstance(value, (list, tuple)) and all(type(v) is int for v in value)
    else:  # tuple[str, ...]
        ok = isinstance(value, (list, tuple)) and all(type(v) is str for v in value)
    if not ok:
        raise RtdError(Code.E_POLICY_INVALID, f"{where} has the wrong type ({type(value).__name__})")


def _check_keys(where: str, data: dict, cls):
    if not isinstance(data, dict):
        raise RtdError(Code.E_POLICY_INVALID, f"{where or 'policy'} must be a table")
    types = _types_of(cls)
    unknown = sorted(set(data) - set(types))
    if unknown:
        raise RtdError(Code.E_POLICY_INVALID, f"unknown key {where}{unknown[0]!r}")
    missing = sorted(set(types) - set(data))
    if missing:
        raise RtdError(Code.E_POLICY_INVALID, f"missing key {where}{missing[0]!r}")
    for key, kind in types.items():
        if kind not in ("Limits", Limits):
            _check_type(where + key, data[key], kind)


def _build(data: dict) -> Policy:
    _check_keys("", data, Policy)
    _check_keys("limits.", data["limits"], Limits)
    convert = {"cpu_cores": float, "gpu_devices": tuple}
    lim = Limits(**{k: convert.get(k, lambda v: v)(v) for k, v in data["limits"].items()})
    bounds = {"memory_bytes": (32 * MIB, 1 << 50), "pids": (4, 1 << 22), "gpu_memory_bytes": (0, 1 << 50),
              "scratch_bytes": (MIB, 1 << 40), "nofile": (8, 1 << 20), "fsize_bytes": (0, 1 << 50),
              "cpu_seconds": (0, 1 << 31), "cpu_weight": (1, 10000)}
    for key, (low, high) in bounds.items():
        if not low <= getattr(lim, key) <= high:
            raise RtdError(Code.E_POLICY_INVALID, f"limits.{key}={getattr(lim, key)} outside [{low}, {high}]")
    if not 0.01 <= lim.cpu_cores <= (os.cpu_count() or 1):
        raise RtdError(Code.E_POLICY_INVALID, f"limits.cpu_cores={lim.cpu_cores} outside [0.01, {os.cpu_count()}]")
    if sorted(set(lim.gpu_devices)) != list(lim.gpu_devices) or any(not 0 <= d < 64 for d in lim.gpu_devices):
        raise RtdError(Code.E_POLICY_INVALID, f"limits.gpu_devices={list(lim.gpu_devices)} must list distinct "
                                              "GPU indices in [0, 64), in increasing order")
    if bool(lim.gpu_devices) != bool(lim.gpu_memory_bytes):
        raise RtdError(Code.E_POLICY_INVALID, "limits.gpu_devices and limits.gpu_memory_bytes go together: "
                                              "a GPU needs a memory budget, and a budget names its GPUs")
    unknown = [m for m in data["mandatory"] if m not in LAYERS]
    if unknown:
        raise RtdError(Code.E_POLICY_INVALID, f"mandatory names unknown layer {unknown[0]!r}; layers: {LAYERS}")
    for path in data["ro_binds"]:
        if not path.startswith("/") or os.path.normpath(path) != path or path in ("/", "/proc", "/scratch"):
            raise RtdError(Code.E_POLICY_INVALID, f"ro_binds entry {path!r} must be a clean absolute path below /")
    parent = data["cgroup_parent"]
    if parent != "auto" and (not parent.startswith("/") or os.path.normpath(parent) != parent or parent == "/"):
        raise RtdError(Code.E_POLICY_INVALID, f"cgroup_parent {parent!r} must be 'auto' or a clean absolute path")
    return Policy(strict=data["strict"], mandatory=tuple(data["mandatory"]), cgroup_parent=parent,
                  ro_binds=tuple(data["ro_binds"]), disable_userns=data["disable_userns"],
                  unsafe_disable_seccomp=data["unsafe_disable_seccomp"], unsafe_gpu_audit=data["unsafe_gpu_audit"], limits=lim)


def _merge(base: dict, overrides: dict) -> dict:
    merged = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merged[key] = _merge(base[key], value)
        else:
            merged[key] = value
    return merged


def load_policy(overrides: dict | None = None, path=None) -> Policy:
    """Parse the policy file (default: policies/default.toml) and merge per-tenant overrides.
    Raises RtdError(E_POLICY_INVALID) on unknown keys, wrong types or impossible values."""
    try:
        if path is None:
            text = importlib.resources.files("rtd.policies").joinpath("default.toml").read_text()
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        base = tomllib.loads(text)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise RtdError(Code.E_POLICY_INVALID, f"cannot read policy file: {e}") from None
    if overrides is not None and not isinstance(overrides, dict):
        raise RtdError(Code.E_POLICY_INVALID, "overrides must be a table")
    return _build(_merge(base, overrides or {}))
