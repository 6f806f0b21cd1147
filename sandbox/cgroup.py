"""Per-worker cgroups. Detects what the host has (pure v2, or v1/hybrid), never assumes:
on v2 it writes memory.max/pids.max/cpu.max and reads memory.events; on v1 it drives
memory and CPU through cgroupspy and pids through cgroupfs. A v2 mount without
controllers (hybrid hosts) still gives the hard kill (cgroup.kill) and `populated`.

Layout: <parent>/<tenant>/<worker> in every hierarchy used; limits sit on the leaf
(one worker per tenant), so usage, OOM counters and the kill are per worker."""
import dataclasses
import errno
import os
import signal
import time

from cgroupspy.nodes import Node

from rtd.errors import Code, RtdError

RESOURCES = ("memory", "pids", "cpu")
CPU_PERIOD_US = 100_000


@dataclasses.dataclass(frozen=True)
class Layout:
    """The host's cgroup hierarchies: mode "v2", "hybrid" or "v1"."""
    mode: str
    v2_root: str | None
    v2_controllers: frozenset
    v1_roots: dict          # controller -> mount point
    own: dict               # controller ("" for v2) -> the caller's cgroup path

    def home(self, resource: str) -> str | None:
        """Which hierarchy drives `resource`: "v2", "v1" or None (unavailable)."""
        if resource in self.v2_controllers:
            return "v2"
        if resource in self.v1_roots:
            return "v1"
        return None

    def describe(self, resource: str) -> str:
        home = self.home(resource)
        files = {"memory": ("memory.max", "memory.limit_in_bytes via cgroupspy"),
                 "pids": ("pids.max", "pids.max via cgroupfs"),
                 "cpu": ("cpu.max", "cpu.cfs_quota_us via cgroupspy")}[resource]
        if home is None:
            return f"unavailable: no {resource} controller in any cgroup hierarchy"
        return f"enforced (cgroup {home} {files[0] if home == 'v2' else files[1]})"


def detect_layout() -> Layout:
    v2_root, v1_roots = None, {}
    with open("/proc/self/mounts") as f:
        for line in f:
            _, mnt, fstype, opts = line.split()[:4]
            if fstype == "cgroup2":
                v2_root = mnt
            elif fstype == "cgroup":
                for opt in opts.split(","):
                    if opt in RESOURCES:
                        v1_roots[opt] = mnt
    controllers = frozenset()
    if v2_root:
        with open(os.path.join(v2_root, "cgroup.controllers")) as f:
            controllers = frozenset(f.read().split()) & set(RESOURCES)
    own = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, ctrls, path = line.rstrip("\n").split(":", 2)
            for c in ctrls.split(",") if ctrls else [""]:
                own[c] = path
    mode = "v1" if v2_root is None else ("v2" if not v1_roots else "hybrid")
    return Layout(mode, v2_root, controllers, v1_roots, own)


def favordynmods_status() -> str:
    """Whether joining a cgroup can skip the RCU grace period: the `favordynmods` mount option
    (a host setting rtd reports and never changes; see bench/RESULTS.md, sandbox start-up)."""
    with open("/proc/self/mounts") as f:
        on = sorted(mnt for _, mnt, fstype, opts, *_ in (line.split() for line in f)
                    if fstype in ("cgroup", "cgroup2") and "favordynmods" in opts.split(","))
    if on:
        return f"on ({', '.join(on)}): joining a cgroup skips the RCU grace period"
    return ("off on every cgroup mount: the first cgroup.procs write of a burst waits for an RCU grace period; "
            "rtd arms a confined spare per tenant so restarts do not wait")


def _write(path: str, value: str):
    with open(path, "w") as f:
        f.write(value)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _keyed(text: str) -> dict:
    return {k: int(v) for k, v in (line.split() for line in text.splitlines() if line.strip())}


class WorkerCgroup:
    """One worker's leaf cgroup in every hierarchy the host offers for its resources."""

    def __init__(self, layout: Layout, dirs: dict, layers: dict):
        self.layout, self.dirs, self.layers = layout, dirs, layers   # dirs: "v2"/"memory"/... -> path

    @classmethod
    def create(cls, layout: Layout, parent: str, tenant: str, worker: str, limits) -> "WorkerCgroup":
        """Make the leaf directories and write the limits; raises RtdError(E_CONTAINMENT)."""
        def leaf(root, own_key):
            base = (layout.own.get(own_key, "/").rstrip("/") + "/rtd") if parent == "auto" else parent
            return os.path.join(root, base.lstrip("/"), tenant, worker)
        dirs, layers = {}, {r: layout.describe(r) for r in RESOURCES}
        try:
            if layout.v2_root:
                dirs["v2"] = leaf(layout.v2_root, "")
                cls._make_v2(layout, dirs["v2"])
            for r in RESOURCES:
                if layout.home(r) == "v1":
                    dirs[r] = leaf(layout.v1_roots[r], r)
                    os.makedirs(dirs[r], exist_ok=True)
            self = cls(layout, dirs, layers)
            self._limit(limits)
        except Exception as e:   # refuse and leave nothing behind, whatever failed
            cls(layout, dirs, layers).remove()
            raise RtdError(Code.E_CONTAINMENT, f"cgroup setup failed: {e}") from None
        layers["kill"] = ("enforced (cgroup v2 cgroup.kill)" if os.path.exists(os.path.join(dirs.get("v2", "/-"), "cgroup.kill"))
                          else "enforced (SIGKILL to the namespace's pid 1)")
        return self

    @staticmethod
    def _make_v2(layout: Layout, path: str):
        """Create the leaf, enabling the v2 controllers along the way down from the mount."""
        wanted = " ".join("+" + c for c in sorted(layout.v2_controllers))
        cur = layout.v2_root
        for part in os.path.relpath(path, layout.v2_root).split("/"):
            if wanted:
                _write(os.path.join(cur, "cgroup.subtree_control"), wanted)
            cur = os.path.join(cur, part)
            os.makedirs(cur, exist_ok=True)

    def _node(self, resource: str) -> Node:
        """A cgroupspy node for the v1 leaf, built without walking the whole tree."""
        root = self.layout.v1_roots[resource]
        node = Node(os.path.dirname(root).encode())
        node = Node(os.path.basename(root).encode(), parent=node)
        for part in os.path.relpath(self.dirs[resource], root).split("/"):
            node = Node(part.encode(), parent=node)
        return node

    def _limit(self, limits):
        mem, quota = limits.memory_bytes, int(limits.cpu_cores * CPU_PERIOD_US)
        for r in RESOURCES:
            home = self.layout.home(r)
            if home == "v2":
                d = self.dirs["v2"]
                if r == "memory":
                    _write(os.path.join(d, "memory.max"), str(mem))
                    if os.path.exists(os.path.join(d, "memory.swap.max")):
                        _write(os.path.join(d, "memory.swap.max"), "0")
                elif r == "pids":
                    _write(os.path.join(d, "pids.max"), str(limits.pids))
                else:
                    _write(os.path.join(d, "cpu.max"), f"{quota} {CPU_PERIOD_US}")
            elif home == "v1" and r == "memory":
                ctl = self._node("memory").controller
                ctl.limit_in_bytes = mem
                if os.path.exists(os.path.join(self.dirs["memory"], "memory.memsw.limit_in_bytes")):
                    ctl.memsw_limit_in_bytes = mem   # no swapping around the limit
            elif home == "v1" and r == "cpu":
                ctl = self._node("cpu").controller
                ctl.cfs_period_us = CPU_PERIOD_US
                ctl.cfs_quota_us = quota
            elif home == "v1" and r == "pids":   # cgroupspy has no pids controller
                _write(os.path.join(self.dirs["pids"], "pids.max"), str(limits.pids))

    @property
    def procs_files(self) -> list[str]:
        """The cgroup.procs files a process writes its pid into to join every hierarchy."""
        return [os.path.join(d, "cgroup.procs") for d in self.dirs.values()]

    def usage(self) -> dict:
        out = dict(memory_bytes=None, memory_peak_bytes=None, oom_kills=self.oom_kills(), pids=None)
        home = self.layout.home("memory")
        try:
            if home == "v2":
                d = self.dirs["v2"]
                out["memory_bytes"] = int(_read(os.path.join(d, "memory.current")))
                if os.path.exists(os.path.join(d, "memory.peak")):
                    out["memory_peak_bytes"] = int(_read(os.path.join(d, "memory.peak")))
            elif home == "v1":
                ctl = self._node("memory").controller
                out["memory_bytes"], out["memory_peak_bytes"] = ctl.usage_in_bytes, ctl.max_usage_in_bytes
            home = self.layout.home("pids")
            if home:
                out["pids"] = int(_read(os.path.join(self.dirs["v2" if home == "v2" else "pids"], "pids.current")))
        except OSError:
            pass   # the leaf is already gone
        return out

    def oom_kills(self) -> int:
        """The kernel's own OOM-kill counter for the leaf (v1 failcnt is unreliable with memsw)."""
        try:
            if self.layout.home("memory") == "v2":
                return _keyed(_read(os.path.join(self.dirs["v2"], "memory.events"))).get("oom_kill", 0)
            if self.layout.home("memory") == "v1":
                return int(self._node("memory").controller.oom_control.get("oom_kill", 0))
        except (OSError, AttributeError):
            pass
        return 0

    def populated(self) -> bool:
        if "v2" in self.dirs:
            try:
                return _keyed(_read(os.path.join(self.dirs["v2"], "cgroup.events"))).get("populated", 0) == 1
            except OSError:
                return False
        return any(self._pids())

    def _pids(self) -> list[int]:
        pids = set()
        for path in self.procs_files:
            try:
                pids.update(int(p) for p in _read(path).split())
            except OSError:
                pass
        return sorted(pids)

    def kill(self):
        """Hard kill of every process in the leaf: cgroup.kill where the kernel has it."""
        kill_file = os.path.join(self.dirs.get("v2", "/-"), "cgroup.kill")
        if os.path.exists(kill_file):
            _write(kill_file, "1")
            return
        for pid in self._pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def remove(self, timeout: float = 2.0):
        """Remove the leaf (and empty tenant/rtd parents); processes must be gone or going."""
        deadline = time.monotonic() + timeout
        for path in self.dirs.values():
            while True:
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError as e:
                    if e.errno != errno.EBUSY or time.monotonic() > deadline:
                        raise RtdError(Code.E_CONTAINMENT, f"cannot remove cgroup {path}: {e}") from None
                    time.sleep(0.005)
            for parent in (os.path.dirname(path), os.path.dirname(os.path.dirname(path))):
                try:
                    os.rmdir(parent)
                except OSError:
                    break   # still used by another worker, or not ours to remove
