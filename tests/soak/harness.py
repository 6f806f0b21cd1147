"""One soak: the daemon under test (tests/daemon/conftest.py's Daemon with the soak's limits,
a socket any uid can reach, its state on a small tmpfs), the clients of each restart
generation, what every actor shares (gate, tally, timeline, book, catalog), and the Actor
base: one chaos element on a thread of its own."""
import os
import random
import re
import shutil
import tempfile
import threading
import traceback
import zlib

from rtd.daemon import config as configuration
from rtd.cli.client import Client
from rtd.daemon.main import instance_id
from tests.daemon.conftest import Daemon
from tests.soak.book import Book
from tests.soak.catalog import Catalog, model_bytes
from tests.soak.gate import Gate, Stopped
from tests.soak.statedisk import StateDisk
from tests.soak.tally import Tally
from tests.soak.timeline import Timeline

CALM = "calm"
MAX_QUEUE, MAX_CONCURRENCY, MEMORY_BYTES = 32, 4, 512 << 20
# Budgets small enough that the hostile tenant reaches every one of them within seconds, and
# timeouts short enough that each cleanup path (auth timeout, stalled-send reset) runs often.
LIMITS = dict(
    max_models=8, crash_limit=3, request_timeout_s=20.0, restart_backoff_s=0.1,
    tenant_request_bytes=16 << 20, tenant_response_bytes=32 << 20, tenant_package_bytes=24 << 20,
    tenant_disk_bytes=8 << 20, tenant_connections=16, tenant_streams=64,
    max_connections_per_peer=32, connection_auth_timeout_s=1.0, send_timeout_s=3.0,
)
# Above both tenants' disk budgets together, plus one package written before the older one
# is collected: only the chaos's filler, never a tenant, can fill it.
STATE_TMPFS_BYTES = 32 << 20
# One connection per client: after a restart a fresh channel connects at once instead of
# waiting out the reconnect back-off of the one the kill broke.
CLIENT_OPTIONS = [("grpc.use_local_subchannel_pool", 1), ("grpc.initial_reconnect_backoff_ms", 100),
                  ("grpc.min_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 1000)]
LOG_EVENTS = ("crash", "resource_kill", "restart_failed", "evict", "rollback_write_failed", "registry_damaged",
              "restore_failed", "load_refused", "budget_refused", "spare_not_armed")
EVENT = re.compile(r"rtd: event=(\w+)")


def seed_of(tenant: str, name: str, counter: int) -> int:
    """The weight seed of a tenant's MLP package: one per (tenant, name, counter)."""
    return zlib.crc32(f"{tenant}/{name}/{counter}".encode())


class Soak:
    def __init__(self, options):
        self.options = options
        self.root = tempfile.mkdtemp(prefix="rtd-soak-")
        self.public = tempfile.mkdtemp(prefix="rtd-soak-public-")
        os.chmod(self.public, 0o755)   # the flood's uid must reach the socket
        self.stop = threading.Event()
        self.gate, self.tally, self.timeline = Gate(self.stop), Tally(), Timeline()
        self.book, self.catalog = Book(), Catalog(options.seed)
        self.hostile = tuple(f"hostile{i}" if i else "hostile" for i in range(options.hostile))
        self.tenants = (CALM, *self.hostile)
        self.disk = StateDisk(os.path.join(self.root, "state"), STATE_TMPFS_BYTES, self.timeline)
        socket_path = os.path.join(self.public, "rtd.sock")
        self.daemon = Daemon(self.root, max_queue=MAX_QUEUE, max_concurrency=MAX_CONCURRENCY, memory_bytes=MEMORY_BYTES,
                             limits=LIMITS, listen=f'[listen]\nunix = "{socket_path}"\nunix_mode = "0666"\n',
                             tenants=self.tenants)
        self.daemon.socket = socket_path
        self.instance = instance_id(configuration.load(self.daemon.config))
        self.lock = threading.Lock()
        self.restart_lock = threading.Lock()      # one kill/restart (or final check) at a time
        self.generation, self.clients = 0, {}
        self.fatal = ""                           # set when the soak cannot go on
        self.runs = 0                             # daemon runs whose log was set aside (rtd.log.<run>)
        self.traceback_logs: set[int] = set()

    # -- clients ------------------------------------------------------------------------------
    def client(self, tenant: str | None) -> Client:
        """This generation's client of `tenant` (None: the operator's, for status)."""
        with self.lock:
            key = (self.generation, tenant)
            if key not in self.clients:
                token = self.daemon.tokens[tenant] if tenant else None
                self.clients[key] = Client(self.daemon.url(), token, options=CLIENT_OPTIONS)
            return self.clients[key]

    def status(self) -> dict:
        return self.client(None).status(self.daemon.admin_token)

    def pids(self, tenant: str, model: str | None = None) -> list[int]:
        """Host pids of the live instances of a tenant's serving versions (of one model)."""
        view = next(t for t in self.status()["tenants"] if t["tenant"] == tenant)
        return [i["pid"] for name, m in view["models"].items() if model in (None, name)
                for i in (m.get("serving") or {}).get("instances", []) if i["live"]]

    def package(self, tenant: str, name: str, key, counter: int) -> dict:
        return self.daemon.package(tenant, model_bytes(key), name, counter=counter)

    # -- the daemon's life -----------------------------------------------------------------------
    def start(self) -> None:
        """Start (again) on a fresh log, with fresh clients."""
        self.scan_log()
        self.daemon.start()
        with self.lock:
            old = [c for (generation, _), c in self.clients.items() if generation == self.generation]
            self.generation += 1
            self.clients = {k: c for k, c in self.clients.items() if k[0] == self.generation}
        for c in old:   # no actor is calling: the gate is closed whenever the daemon restarts
            c.close()

    def kill9(self) -> None:
        self.daemon.proc.kill()
        self.daemon.proc.wait()

    def scan_log(self) -> None:
        """Count the last run's log events and report its tracebacks, then set the log aside
        (a long soak's log would grow without end, and Daemon.start() reads it whole)."""
        if not os.path.exists(self.daemon.log):
            return
        text = self.daemon.read_log()
        for event in EVENT.findall(text):
            if event in LOG_EVENTS:
                self.tally.event(f"log:{event}")
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if line.startswith("Traceback (most recent call last):"):
                # what logged it comes before; the exception is the first line after the (indented) frames
                before = " / ".join(x[:70] for x in lines[max(0, i - 2):i])
                raised = next((x for x in lines[i + 1:] if x.strip() and not x.startswith(" ")), "?")
                self.tally.violation("daemon traceback", f"rtd.log.{self.runs + 1}: {before} → {raised[:200]}")
        self.runs += 1
        os.replace(self.daemon.log, f"{self.daemon.log}.{self.runs}")
        previous = f"{self.daemon.log}.{self.runs - 1}"
        if self.runs - 1 not in self.traceback_logs and os.path.exists(previous):
            os.unlink(previous)   # kept: the latest log and every one with a traceback
        if "Traceback" in text:
            self.traceback_logs.add(self.runs)

    # -- what a daemon leaves -------------------------------------------------------------------
    def processes(self) -> list[str]:
        """Processes of this daemon: in its instance's cgroups, or forked from it (the zygote and
        workers keep its command line, which names this soak's config)."""
        marker, config = f"/rtd/{self.instance}/", self.daemon.config.encode()
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cgroup") as f:
                    cgroups = f.read()
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read()
            except OSError:
                continue
            if marker in cgroups or config in cmdline:
                command = cmdline.replace(b"\0", b" ").decode(errors="replace")[:80]
                found.append(f"{pid} {command}")
        return found

    def cgroup_dirs(self) -> list[str]:
        marker = f"/rtd/{self.instance}"
        return [path for path, _, _ in os.walk("/sys/fs/cgroup") if marker in path]

    def close(self, keep: bool) -> None:
        for c in self.clients.values():
            c.close()
        if keep and self.disk.mounted:   # the tmpfs goes with the unmount: keep what the daemon had on it
            shutil.copytree(self.disk.path, os.path.join(self.root, "state-at-end"), dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns(os.path.basename(self.disk.filler)))
        self.disk.unmount()
        if keep:
            self.tally.note(f"kept for inspection: {self.root} (logs rtd.log*)")
            return
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(self.public, ignore_errors=True)


class Actor(threading.Thread):
    """One chaos element: `step()` every uniform(low, high) seconds until the soak stops.
    An exception a step does not expect is a violation (the daemon's or the soak's), never
    a silent end of the element."""
    low, high = 1.0, 1.0
    element = ""        # the name --skip knows it by ("": never skipped)

    def __init__(self, soak: Soak, name: str):
        super().__init__(name=name, daemon=True)
        self.soak = soak
        self.rng = random.Random(f"{soak.options.seed}/{name}")

    def run(self) -> None:
        while not self.soak.stop.wait(self.rng.uniform(self.low, self.high)):
            try:
                self.step()
            except Stopped:
                return
            except Exception:
                self.soak.tally.violation("actor failed", f"{self.name}: {traceback.format_exc(limit=8)}")

    def step(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """After the thread has ended: release what the actor holds besides it."""
        pool = getattr(self, "pool", None)
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
