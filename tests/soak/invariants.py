"""The soak's invariants, each a named check in the tally:

  supervisor rss      VmRSS of the supervisor ≤ Bounds.rss (formula in Bounds)
  supervisor fds      open fds of the supervisor ≤ Bounds.fds
  budgets within limits / budgets released when idle   the ledger never holds more than a
                      limit, and holds no request, byte or stream once nothing is in flight
  registry names only present blobs   on disk at any moment (index read twice around the
                      listing, so a change in between is not taken for a loss)
  no temporaries after restart, nothing damaged after restart
  acknowledged state after restart    every acknowledged load there and answering as its
                      version, every acknowledged unload (or refused load) without a trace
  memory matches disk when idle       the daemon's index names what registry.json names, and
                      no model is stuck LOADING or UNLOADING with nothing in flight
  no orphans after kill -9            the zygote and workers die with their supervisor
  nothing left after stop             no process, no cgroup directory of the instance

Checked where the chaos happens: calm never refused, calm answer right (calm.py); hostile
answer right, no internal errors, no request hangs, acknowledged load vanished, unload cut
short settles (hostile.py); idle flood capped per peer, idle connections closed, daemon
restarts, supervisor stays up (disruptions.py, Monitor below); daemon traceback, from the
daemon's log at every restart (harness.py); clean stop (chaos.py).
"""
import dataclasses
import json
import os
import time

from rtd.daemon.transport.contract import WRITE_HIGH_WATER
from rtd.errors import RtdError
from tests.soak.harness import LIMITS, Actor
from tests.soak.tally import no_answer

MIB = 1 << 20
RSS_SLACK = 64 * MIB         # allocator slack and per-request Python objects
FD_SLACK = 32                # listeners, zygote channels, spares, accepts in progress
PACKAGE_FILES = 5            # config.pbtxt, model.onnx, metadata.json, checksum.sha256(.sig)
FDS_PER_FILE = 2             # each sealed package file is held as two memfd descriptors (measured)
PEERS = 2                    # uid 0 (the tenants' clients) and uid 65534 (the flood)
IDLE_RESOURCES = ("requests", "request_bytes", "response_bytes", "streams")
MONITOR_PERIOD_S = 0.5
DEEP_EVERY = 10              # registry and ledger checks on every 10th monitor step


@dataclasses.dataclass(frozen=True)
class Bounds:
    """What the supervisor may hold, from its baseline (after start and the first loads) and
    the budgets the soak configures (T tenants):

      rss ≤ baseline + T × (2 × tenant_request_bytes + tenant_response_bytes + tenant_package_bytes)
                     + PEERS × max_connections_per_peer × WRITE_HIGH_WATER + RSS_SLACK

    (a request is held twice while it is decoded; a response in the worker's arena while a
    copy of up to WRITE_HIGH_WATER sits in each connection's write buffer), and

      fds ≤ baseline + PEERS × max_connections_per_peer
                     + T × max_models × 2 versions × (FDS_PER_FILE × PACKAGE_FILES + 1 channel)
                     + FD_SLACK
    """
    rss_baseline: int
    fd_baseline: int
    tenants: int

    @property
    def rss(self) -> int:
        per_tenant = 2 * LIMITS["tenant_request_bytes"] + LIMITS["tenant_response_bytes"] + LIMITS["tenant_package_bytes"]
        return (self.rss_baseline + self.tenants * per_tenant
                + PEERS * LIMITS["max_connections_per_peer"] * WRITE_HIGH_WATER + RSS_SLACK)

    @property
    def fds(self) -> int:
        per_model = 2 * (FDS_PER_FILE * PACKAGE_FILES + 1)
        return self.fd_baseline + PEERS * LIMITS["max_connections_per_peer"] + self.tenants * LIMITS["max_models"] * per_model + FD_SLACK

    def describe(self) -> str:
        return (f"rss ≤ {self.rss // MIB} MiB (baseline {self.rss_baseline // MIB} MiB + budgets and buffers), "
                f"fds ≤ {self.fds} (baseline {self.fd_baseline})")


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) << 10 for line in f if line.startswith("VmRSS:"))


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


# -- durable state ---------------------------------------------------------------------------------
def _registry(state: str) -> dict:
    """{tenant: {model: entry}} as each tenant's registry.json says (tenants/<tenant>/registry.json)."""
    found = {}
    tenants = os.path.join(state, "tenants")
    for tenant in sorted(os.listdir(tenants)) if os.path.isdir(tenants) else ():
        try:
            with open(os.path.join(tenants, tenant, "registry.json")) as f:
                found[tenant] = json.load(f)["models"]
        except FileNotFoundError:
            continue
    return found


def registry_names(soak) -> dict[str, set]:
    return {t: set(models) for t, models in _registry(soak.daemon.state).items()}


def registry_blobs(soak, temporaries_too: bool) -> None:
    """Every blob registry.json names is in blobs/ (and, after a restart, no temporary is left)."""
    state = soak.daemon.state
    blobs = os.path.join(state, "blobs")
    for _ in range(5):
        before = _registry(state)
        present = set(os.listdir(blobs)) if os.path.isdir(blobs) else set()
        if _registry(state) == before:
            break
    named = {d: f"{t}/{n}" for t, models in before.items() for n, e in models.items() for d in e["files"].values()}
    missing = sorted(f"{who} {digest[:12]}" for digest, who in named.items() if digest not in present)
    soak.tally.check("registry names only present blobs", not missing, f"registry.json names missing blobs: {missing[:5]}")
    if temporaries_too:
        dots = [n for n in os.listdir(state) + sorted(present) if n.startswith(".")]
        soak.tally.check("no temporaries after restart", not dots, f"temporaries left: {dots[:5]}")


def ledger(soak, idle: bool) -> None:
    """Budgets never above their limits; when idle, no request, byte or stream still held."""
    status = soak.status()
    for view in status["tenants"]:
        for resource, usage in view["budgets"].items():
            soak.tally.check("budgets within limits", usage["used"] <= usage["limit"],
                             f"{view['tenant']} {resource}: {usage['used']} > {usage['limit']}")
            if idle and resource in IDLE_RESOURCES:
                soak.tally.check("budgets released when idle", usage["used"] == 0,
                                 f"{view['tenant']} {resource}: {usage['used']} still held with nothing in flight")


# -- the acknowledged state --------------------------------------------------------------------------
def acknowledged(soak, after_restart: bool) -> None:
    """The daemon holds what the book says it acknowledged; the book learns what was unknown."""
    snapshot = soak.book.snapshot()
    indexes = {t: {m.name: m.state for m in soak.client(t).index()} for t in soak.tenants}
    for (tenant, name), (possible, in_flight) in sorted(snapshot.items(), key=str):
        if in_flight:
            soak.tally.violation("soak bookkeeping", f"{tenant}/{name} has {in_flight} operations in flight at a check")
            continue
        state = indexes[tenant].get(name)
        if state is None:
            ok = soak.tally.check("acknowledged state", None in possible,
                                  f"{tenant}/{name}: acknowledged as {possible} but gone"
                                  + (" after a restart" if after_restart else "")
                                  + f"; history: {soak.book.history(tenant, name)}")
            if ok:
                soak.book.resolve(tenant, name, None)
            continue
        if state == "FAILED" and not after_restart:
            continue   # the hostile tenant's kills do that; a restart starts it afresh
        keys = [k for k in possible if k is not None]
        try:
            found = soak.catalog.identify(soak.client(tenant), name, keys) if keys else None
        except RtdError as e:
            soak.tally.check("acknowledged state", False, f"{tenant}/{name} ({state}) does not answer: {e}")
            continue
        if soak.tally.check("acknowledged state", found is not None,
                            f"{tenant}/{name} ({state}) answers as none of {sorted(possible, key=str)}; "
                            f"history: {soak.book.history(tenant, name)}"):
            soak.book.resolve(tenant, name, found)
    for tenant, index in indexes.items():
        strangers = sorted(set(index) - {n for t, n in snapshot if t == tenant})
        soak.tally.check("acknowledged state", not strangers, f"{tenant}: models nobody loaded: {strangers}")


def after_restart(soak) -> None:
    registry_blobs(soak, temporaries_too=True)
    damaged = soak.status()["damaged"]
    soak.tally.check("nothing damaged after restart", not damaged, f"status damaged: {damaged[:3]}")
    acknowledged(soak, after_restart=True)


def quiescent(soak, timeout: float = 60.0) -> None:
    """With the gate closed: wait for what the daemon still does on its own (loads whose
    caller left, answers to abandoned requests), then hold memory against disk and book."""
    soak.tally.check("calls end when the gate closes", soak.gate.drained(timeout), "calls still in flight")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(u["used"] == 0 for v in soak.status()["tenants"] for r, u in v["budgets"].items() if r in IDLE_RESOURCES):
            break
        time.sleep(0.2)
    ledger(soak, idle=True)
    on_disk = registry_names(soak)
    for tenant in soak.tenants:
        index = {m.name: m.state for m in soak.client(tenant).index()}
        apart = sorted(set(index) ^ on_disk.get(tenant, set()))
        soak.tally.check("memory matches disk when idle", not apart,
                         f"{tenant}: index {sorted(index)} vs registry.json {sorted(on_disk.get(tenant, ()))}; "
                         + "; ".join(f"{n}: {soak.book.history(tenant, n)}" for n in apart))
        stuck = {n: s for n, s in index.items() if s in ("LOADING", "UNLOADING")}
        soak.tally.check("memory matches disk when idle", not stuck, f"{tenant}: stuck with nothing in flight: {stuck}")
    registry_blobs(soak, temporaries_too=False)
    acknowledged(soak, after_restart=False)


# -- processes ---------------------------------------------------------------------------------------
def gone(soak, what: str, timeout: float, cgroups: bool) -> None:
    """No process (and, with `cgroups`, no cgroup directory) of this daemon within `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        procs, dirs = soak.processes(), soak.cgroup_dirs() if cgroups else []
        if (not procs and not dirs) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    soak.tally.check(what, not procs and not dirs, f"left after {timeout:g} s: processes {procs[:4]}, cgroups {dirs[:4]}")


class Monitor(Actor):
    """Samples the supervisor's RSS and fds while it is up; registry and ledger every few
    steps. A supervisor that exits on its own is a violation, and is restarted."""
    low = high = MONITOR_PERIOD_S

    def __init__(self, soak, name: str, bounds: Bounds, conductor):
        super().__init__(soak, name)
        self.bounds, self.conductor, self.steps = bounds, conductor, 0

    def step(self) -> None:
        soak = self.soak
        if not soak.gate.up:
            return
        proc = soak.daemon.proc
        if proc.poll() is not None:
            if soak.gate.up:   # not the conductor's doing
                soak.tally.violation("supervisor stays up", f"rtd serve exited {proc.returncode} on its own")
                self.conductor.recover()
            return
        try:
            now_rss, now_fds = rss(proc.pid), fds(proc.pid)
        except (OSError, StopIteration):
            return   # it died between poll() and the read: the next step sees it
        soak.tally.peak("rss_mib", round(now_rss / MIB, 1))
        soak.tally.peak("fds", now_fds)
        soak.tally.check("supervisor rss", now_rss <= self.bounds.rss, f"VmRSS {now_rss // MIB} MiB > {self.bounds.rss // MIB} MiB")
        soak.tally.check("supervisor fds", now_fds <= self.bounds.fds, f"{now_fds} fds > {self.bounds.fds}")
        self.steps += 1
        if self.steps % DEEP_EVERY == 0:
            registry_blobs(soak, temporaries_too=False)
            with soak.gate.call():
                try:
                    ledger(soak, idle=False)
                except RtdError as e:
                    if not no_answer(e):   # only a kill in between excuses it
                        raise
