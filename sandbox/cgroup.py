"""Worker cgroups on whatever hierarchies the host has (pure v2, hybrid or v1), never
assumed: on v2 memory.max/pids.max/cpu.max and memory.events, and dmem.max where the
kernel's dmem controller lists a region of the tenant's GPUs (sandbox/gpu_memory.py); on v1 memory and CPU
through cgroupspy and pids through cgroupfs. A v2 mount without controllers (hybrid hosts)
only adds the hard kill (cgroup.kill) and `populated`: where rtd may not create directories
there (no CAP_DAC_OVERRIDE on a 0555 mount), workers start without a v2 leaf and the hard
kill is SIGKILL to the namespace's pid 1; where v2 drives a controller, that is a refusal.

Layout, in every hierarchy used: <base>/<instance>/<tenant>/<worker>. <base> is "rtd" below
the daemon's own cgroup (cgroup_parent "auto") or the policy's absolute parent; the
instance id keeps two daemons on one host apart. The policy's limits sit on the tenant
node, so they bound the tenant as a whole however many workers it runs; each worker has a
leaf below it, so usage, OOM-kill counters, `populated` and the kill are per worker, and
`WorkerCgroup.tenant_usage()` reads the shared node. Removing a leaf prunes the tenant node,
the instance node and "rtd" once they are empty; `cleanup_instance` removes what a daemon
killed with SIGKILL left behind."""
import dataclasses
import errno
import logging
import os
import signal
import threading
import time

from cgroupspy.nodes import Node

from rtd.errors import Code, RtdError
from rtd.sandbox import gpu_memory
from rtd.sandbox.policy import is_name

RESOURCES = ("memory", "pids", "cpu")
V2_ONLY = ("dmem",)   # GPU memory regions: a v2 controller only, written when a tenant names GPUs
CPU_PERIOD_US = 100_000
REMOVE_TIMEOUT_S = 2.0
UNLIMITED_V1 = 1 << 62   # v1 reports "no limit" as a page-rounded LONG_MAX
KILL_BY_CGROUP = "enforced (cgroup v2 cgroup.kill)"
KILL_BY_PID1 = "enforced (SIGKILL to the namespace's pid 1)"
log = logging.getLogger("rtd.sandbox")
_warned_unwritable: set[str] = set()   # v2 mounts already warned about: once per process
# Making a tenant node and its leaf, and pruning empty nodes, exclude each other in this
# process: a node is empty until its leaf exists, and must never lose its limits meanwhile.
_tree_lock = threading.Lock()


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
        return f"enforced (cgroup {home} {files[0] if home == 'v2' else files[1]}, per tenant)"

    def hierarchies(self) -> dict[str, str]:
        """The hierarchies rtd uses, v2 first: "v2" (when mounted) and each v1 resource -> mount."""
        used = {"v2": self.v2_root} if self.v2_root else {}
        used.update({r: self.v1_roots[r] for r in RESOURCES if self.home(r) == "v1"})
        return used

    def base(self, hierarchy: str, parent: str) -> str:
        """<base> in `hierarchy`: "rtd" below our own cgroup ("auto"), or the absolute parent."""
        root = self.hierarchies()[hierarchy]
        if parent == "auto":
            parent = self.own.get("" if hierarchy == "v2" else hierarchy, "/").rstrip("/") + "/rtd"
        return os.path.join(root, parent.lstrip("/"))

    def writable(self, hierarchy: str, parent: str) -> bool:
        """Whether this process may create instance directories below <base>: the deepest
        directory on the way that exists is writable. access(2) judges root by its permitted
        capabilities, so a bounding set without CAP_DAC_OVERRIDE shows here."""
        path = self.base(hierarchy, parent)
        while not os.path.isdir(path):
            path = os.path.dirname(path)
        return os.access(path, os.W_OK | os.X_OK)


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
            controllers = frozenset(f.read().split()) & {*RESOURCES, *V2_ONLY}
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


def check_instance(instance: str) -> str:
    """The instance id, refused unless it can name a cgroup directory of its own."""
    if not is_name(instance):
        raise RtdError(Code.E_POLICY_INVALID, f"instance id {instance!r} must be 1-64 of [A-Za-z0-9_-]")
    return instance


def _write(path: str, value: str):
    with open(path, "w") as f:
        f.write(value)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _keyed(text: str) -> dict:
    return {k: int(v) for k, v in (line.split() for line in text.splitlines() if line.strip())}


def _v1_node(root: str, path: str) -> Node:
    """A cgroupspy node for `path` in the v1 hierarchy mounted at `root`, built without
    walking the whole tree."""
    node = Node(os.path.dirname(root).encode())
    node = Node(os.path.basename(root).encode(), parent=node)
    for part in os.path.relpath(path, root).split("/"):
        node = Node(part.encode(), parent=node)
    return node


def _pids(dirs) -> list[int]:
    pids = set()
    for d in dirs:
        try:
            pids.update(int(p) for p in _read(os.path.join(d, "cgroup.procs")).split())
        except OSError:
            pass
    return sorted(pids)


def _kill(dirs) -> None:
    """SIGKILL every process in these cgroups: one write to a v2 cgroup.kill where there is
    one (it also reaches what forks meanwhile), else each pid listed in cgroup.procs."""
    for d in dirs:
        kill_file = os.path.join(d, "cgroup.kill")
        if os.path.exists(kill_file):
            try:
                _write(kill_file, "1")
                return
            except OSError:   # the leaf went meanwhile (its last process exited): kill what is listed
                break
    for pid in _pids(dirs):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _rmdir(path: str, deadline: float, kill: bool = False) -> None:
    """Remove one cgroup directory, waiting while it is busy (processes exiting); with
    `kill`, SIGKILL what is still in it on each try."""
    while True:
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if e.errno != errno.EBUSY or time.monotonic() > deadline:
                raise RtdError(Code.E_CONTAINMENT, f"cannot remove cgroup {path}: {e}") from None
        if kill:
            _kill([path])
        time.sleep(0.005)


def _prune(path: str, top: str) -> None:
    """Remove `path` and its parents up to `top` while they are empty; a busy one (another
    worker, tenant or instance still there) ends the climb."""
    while True:
        try:
            os.rmdir(path)
        except OSError:
            return
        if path == top:
            return
        path = os.path.dirname(path)


class WorkerCgroup:
    """One worker's leaf below its tenant node, in every hierarchy rtd uses."""

    def __init__(self, layout: Layout, parent: str, dirs: dict, layers: dict):
        self.layout, self.parent, self.layers = layout, parent, layers
        self.dirs = dirs   # hierarchy ("v2", "memory", ...) -> the worker's leaf

    @classmethod
    def create(cls, layout: Layout, parent: str, instance: str, tenant: str, worker: str, limits) -> "WorkerCgroup":
        """Make the tenant node (once; its limits written every time, so the latest policy
        holds) and the worker's leaf below it; raises RtdError(E_CONTAINMENT)."""
        check_instance(instance)
        self = cls(layout, parent, {}, {r: layout.describe(r) for r in RESOURCES})
        nodes = {h: os.path.join(layout.base(h, parent), instance, tenant) for h in layout.hierarchies()}
        try:
            with _tree_lock:
                for hierarchy, node in nodes.items():
                    self._make_leaf(hierarchy, node, worker, limits)
        except Exception as e:   # refuse and leave nothing behind, whatever failed
            self.remove()
            with _tree_lock:
                for node in nodes.values():
                    _prune(node, self._top(node))
            raise RtdError(Code.E_CONTAINMENT, f"cgroup setup failed: {e}") from None
        has_kill = "v2" in self.dirs and os.path.exists(os.path.join(self.dirs["v2"], "cgroup.kill"))
        self.layers["kill"] = KILL_BY_CGROUP if has_kill else KILL_BY_PID1
        return self

    def _make_leaf(self, hierarchy: str, node: str, worker: str, limits):
        """The tenant node with its limits, then the leaf. Another instance pruning the shared
        "rtd" meanwhile makes a step fail with ENOENT: then all of them again."""
        leaf = os.path.join(node, worker)
        for attempt in range(3):
            try:
                self._make_nodes(hierarchy, node)
                self._limit(hierarchy, node, limits)
                os.mkdir(leaf)   # never makedirs: a tenant node must not reappear without its limits
            except FileExistsError:
                pass   # co-mounted v1 controllers share one directory
            except FileNotFoundError:
                if attempt == 2:
                    raise
                continue
            except PermissionError as e:
                if hierarchy != "v2" or self.layout.v2_controllers & set(RESOURCES) or self._dmem_lines(limits):
                    raise   # this hierarchy drives a controller: no leaf, no worker
                if self.layout.v2_root not in _warned_unwritable:
                    _warned_unwritable.add(self.layout.v2_root)
                    log.warning("cgroup v2 tree not writable (%s): workers start without a v2 leaf; "
                                "their hard kill is SIGKILL to the namespace's pid 1", e)
                return
            self.dirs[hierarchy] = leaf
            return

    def _make_nodes(self, hierarchy: str, node: str):
        """Create the path down to the tenant node; on v2, enable the controllers on the way
        and in the node itself, so its leaves get their memory.* and pids.* files."""
        if hierarchy != "v2":
            os.makedirs(node, exist_ok=True)
            return
        wanted = " ".join("+" + c for c in sorted(self.layout.v2_controllers))
        cur = self.layout.v2_root
        for part in os.path.relpath(node, cur).split("/") + [None]:
            if wanted:
                _write(os.path.join(cur, "cgroup.subtree_control"), wanted)
            if part is not None:
                cur = os.path.join(cur, part)
                os.makedirs(cur, exist_ok=True)

    def _limit(self, hierarchy: str, node: str, limits):
        """Write the policy's limits on the tenant node, in the hierarchy that drives each."""
        mem, quota = limits.memory_bytes, int(limits.cpu_cores * CPU_PERIOD_US)
        if hierarchy == "v2":
            if "memory" in self.layout.v2_controllers:
                _write(os.path.join(node, "memory.max"), str(mem))
                if os.path.exists(os.path.join(node, "memory.swap.max")):
                    _write(os.path.join(node, "memory.swap.max"), "0")
            if "pids" in self.layout.v2_controllers:
                _write(os.path.join(node, "pids.max"), str(limits.pids))
            if "cpu" in self.layout.v2_controllers:
                _write(os.path.join(node, "cpu.max"), f"{quota} {CPU_PERIOD_US}")
                _write(os.path.join(node, "cpu.weight"), str(limits.cpu_weight))
            for line in self._dmem_lines(limits):   # one region per write, as the kernel parses it
                _write(os.path.join(node, "dmem.max"), line)
        elif hierarchy == "memory":
            ctl = _v1_node(self.layout.v1_roots["memory"], node).controller
            memsw = os.path.exists(os.path.join(node, "memory.memsw.limit_in_bytes"))
            # memory+swap may never be below memory: raise it first, lower it last
            raise_memsw_first = memsw and mem > ctl.memsw_limit_in_bytes
            if raise_memsw_first:
                ctl.memsw_limit_in_bytes = mem
            ctl.limit_in_bytes = mem
            if memsw and not raise_memsw_first:
                ctl.memsw_limit_in_bytes = mem   # no swapping around the limit
        elif hierarchy == "cpu":
            ctl = _v1_node(self.layout.v1_roots["cpu"], node).controller
            ctl.cfs_period_us = CPU_PERIOD_US
            ctl.cfs_quota_us = quota
            ctl.shares = max(2, limits.cpu_weight * 1024 // 100)   # v1's default 1024 is v2's weight 100
        elif hierarchy == "pids":   # cgroupspy has no pids controller
            _write(os.path.join(node, "pids.max"), str(limits.pids))

    def _dmem_lines(self, limits) -> tuple[str, ...]:
        """"<region> <bytes>" for each dmem region of the tenant's GPUs, where the controller is on."""
        if "dmem" not in self.layout.v2_controllers or not limits.gpu_devices:
            return ()
        return gpu_memory.plan(limits.gpu_devices, limits.gpu_memory_bytes, self.layout.v2_root, v2_writable=True).dmem_max

    @property
    def procs_files(self) -> list[str]:
        """The cgroup.procs files a process writes its pid into to join every hierarchy."""
        return [os.path.join(d, "cgroup.procs") for d in self.dirs.values()]

    @property
    def tenant_dirs(self) -> dict:
        """Hierarchy -> the tenant node this leaf sits in (where the limits are)."""
        return {h: os.path.dirname(d) for h, d in self.dirs.items()}

    def _dir_of(self, resource: str) -> str | None:
        home = self.layout.home(resource)
        return self.dirs.get("v2" if home == "v2" else resource) if home else None

    def usage(self) -> dict:
        """This worker's own use: memory (bytes, peak), OOM kills and pids of its leaf."""
        out = dict(memory_bytes=None, memory_peak_bytes=None, oom_kills=self.oom_kills(), pids=None)
        home, leaf = self.layout.home("memory"), self._dir_of("memory")
        try:
            if home == "v2":
                out["memory_bytes"] = int(_read(os.path.join(leaf, "memory.current")))
                if os.path.exists(os.path.join(leaf, "memory.peak")):
                    out["memory_peak_bytes"] = int(_read(os.path.join(leaf, "memory.peak")))
            elif home == "v1":
                ctl = _v1_node(self.layout.v1_roots["memory"], leaf).controller
                out["memory_bytes"], out["memory_peak_bytes"] = ctl.usage_in_bytes, ctl.max_usage_in_bytes
            if self._dir_of("pids"):
                out["pids"] = int(_read(os.path.join(self._dir_of("pids"), "pids.current")))
        except OSError:
            pass   # the leaf is already gone
        return out

    def tenant_usage(self) -> dict:
        """What the tenant's workers of this instance use together, read from the tenant
        node: memory_bytes and memory_limit_bytes, pids and pids_limit (a limit is None when
        unlimited; every value None when the node is gone). The supervisor compares these
        with the tenant's budget; each worker's own share is `usage()`."""
        out = dict(memory_bytes=None, memory_limit_bytes=None, pids=None, pids_limit=None)
        memory, pids = self._dir_of("memory"), self._dir_of("pids")
        try:
            if self.layout.home("memory") == "v2":
                node = os.path.dirname(memory)
                out["memory_bytes"] = int(_read(os.path.join(node, "memory.current")))
                limit = _read(os.path.join(node, "memory.max")).strip()
                out["memory_limit_bytes"] = None if limit == "max" else int(limit)
            elif self.layout.home("memory") == "v1":
                ctl = _v1_node(self.layout.v1_roots["memory"], os.path.dirname(memory)).controller
                out["memory_bytes"] = ctl.usage_in_bytes
                out["memory_limit_bytes"] = None if ctl.limit_in_bytes >= UNLIMITED_V1 else ctl.limit_in_bytes
            if pids:
                node = os.path.dirname(pids)
                out["pids"] = int(_read(os.path.join(node, "pids.current")))
                limit = _read(os.path.join(node, "pids.max")).strip()
                out["pids_limit"] = None if limit == "max" else int(limit)
        except OSError:
            pass
        return out

    def oom_kills(self) -> int:
        """The kernel's own OOM-kill counter of the leaf: it counts this worker's processes
        killed, whichever node's limit was hit (v1 failcnt is unreliable with memsw)."""
        leaf = self._dir_of("memory")
        try:
            if self.layout.home("memory") == "v2":
                return _keyed(_read(os.path.join(leaf, "memory.events"))).get("oom_kill", 0)
            if self.layout.home("memory") == "v1":
                return int(_v1_node(self.layout.v1_roots["memory"], leaf).controller.oom_control.get("oom_kill", 0))
        except (OSError, AttributeError):
            pass
        return 0

    def populated(self) -> bool:
        if "v2" in self.dirs:
            try:
                return _keyed(_read(os.path.join(self.dirs["v2"], "cgroup.events"))).get("populated", 0) == 1
            except OSError:
                return False
        return any(_pids(self.dirs.values()))

    def kill(self):
        """Hard kill of every process in the leaf: cgroup.kill where the kernel has it."""
        _kill(self.dirs.values())

    def remove(self, timeout: float = REMOVE_TIMEOUT_S):
        """Remove the leaf, then the tenant node, the instance node and "rtd" (for "auto")
        while they are empty; the leaf's processes must be gone or going."""
        deadline = time.monotonic() + timeout
        for leaf in self.dirs.values():
            _rmdir(leaf, deadline)
            with _tree_lock:
                _prune(os.path.dirname(leaf), self._top(os.path.dirname(leaf)))

    def _top(self, node: str) -> str:
        """The highest directory pruning may remove above a tenant node: "rtd" for "auto",
        else the instance node (the policy's absolute parent is the operator's)."""
        instance_node = os.path.dirname(node)
        return os.path.dirname(instance_node) if self.parent == "auto" else instance_node


def cleanup_instance(layout: Layout, parent: str, instance: str) -> list[str]:
    """Remove every directory below <base>/<instance> in every hierarchy, deepest first,
    SIGKILLing whatever still runs in one, and "rtd" (for "auto") once empty: what a daemon
    killed with SIGKILL left behind. For the daemon at start, with its own instance id and
    each cgroup_parent its policies use, before it spawns anything. Returns the directories
    removed; raises RtdError(E_CONTAINMENT) for one that stays busy."""
    check_instance(instance)
    removed = []
    for hierarchy in layout.hierarchies():
        base = layout.base(hierarchy, parent)
        for path, _, _ in os.walk(os.path.join(base, instance), topdown=False):
            _rmdir(path, time.monotonic() + REMOVE_TIMEOUT_S, kill=True)
            removed.append(path)
        if parent == "auto":
            with _tree_lock:
                _prune(base, base)
    return removed
