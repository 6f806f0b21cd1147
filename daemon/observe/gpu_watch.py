"""The supervisor's NVML watcher (nvidia-ml-py): the GPU memory limit of last resort, and
the source of the GPU metrics and GPU health.

Every `poll_s` (5 ms; the design promises ≤ 10) it asks NVML, per GPU, for the memory each
process uses (nvmlDeviceGetComputeRunningProcesses), matches each process to a worker in
the daemon's own pid namespace (sandbox/pidns.py: NVML's pid as /proc's NSpid places it,
whichever namespace the daemon runs in), sums it per tenant over the tenant's live
workers, and when a tenant's sum passes its `gpu_memory_bytes` SIGKILLs that tenant's
largest worker with layer "gpu", so its exit status reads E_SANDBOX_KILLED (layer gpu) and
the owner counts it as a resource kill like the memory layer's.

Attribution is checked, never assumed: a GPU is blind, and unhealthy with the reason, while
NVML gives a process no memory figure (usedGpuMemory not available), lists a pid that is no
process the daemon's namespace can see (host pids reported into a container), serves MPS
clients (whose memory NVML does not give per process), or does not list a worker the
watcher polices (its context holds memory, so NVML must; after UNLISTED_GRACE_S). A
process the daemon sees that is no worker of a tenant is another program's, and is neither
counted nor killed. `start` refuses (E_GPU_UNATTRIBUTED) when a GPU is blind at the first
poll; later, blindness makes the GPU unhealthy until it clears, so readiness says so. It watches every tenant that names GPUs, whichever layer
sandbox/gpu_memory.py puts in force (under MPS it is the only per-tenant sum). It is
detection, not prevention: between two polls a worker can allocate past its budget and
another tenant on the same GPU can hit out-of-memory; a worker's usage includes its CUDA
context. Each kill's latency, from the start of the poll that saw it to the kill, is in
its event line.

NVML calls block, so all of them run on this thread, never on the event loop: the loop
reads only what the thread cached (`readings` for Triton's nv_gpu_* gauges, refreshed
every METRICS_EVERY_S; `healthy` for readiness). A GPU whose process query fails is
unhealthy until one succeeds again. Without NVML (no library, no driver) `start` refuses
(E_LAYER_UNAVAILABLE) and the daemon runs without the watcher; `rtctl doctor` says so."""
import dataclasses
import threading
import time

from rtd.errors import Code, RtdError
from rtd.sandbox.gpu_memory import WATCH_INTERVAL_S
from rtd.sandbox.pidns import in_our_namespace

METRICS_EVERY_S = 1.0
UNLISTED_GRACE_S = 2.0   # a worker's context exists before it is handed over: NVML lists it well within this


@dataclasses.dataclass(frozen=True)
class Gpu:
    minor: int      # /dev/nvidiaN: how policies name it
    uuid: str
    handle: object


@dataclasses.dataclass(frozen=True)
class GpuReading:
    """One GPU's gauges, as Triton exports them."""
    uuid: str
    utilization: float   # [0.0, 1.0)
    memory_used_bytes: int
    memory_total_bytes: int
    power_watts: float


@dataclasses.dataclass(frozen=True)
class GpuKill:
    """What one kill by the watcher did, for the event log."""
    tenant: str
    pid: int
    tenant_bytes: int
    worker_bytes: int
    budget_bytes: int
    latency_ms: float


def attribution(gpu: Gpu, processes: list, mps_clients: int, watched: set[int],
                ended: frozenset = frozenset()) -> tuple[dict[int, int], str | None]:
    """Our pid -> bytes on this GPU of the processes NVML lists that the daemon's namespace sees,
    and why the GPU is blind (None: every byte NVML counts is attributed). `watched`: the pids
    of the workers the watcher polices (another process we see is another program's); `ended`:
    those of workers that ended moments ago, which NVML may list until their context is gone."""
    used: dict[int, int] = {}
    why = None
    if mps_clients:
        why = f"NVIDIA MPS serves {mps_clients} client(s) on GPU {gpu.minor}: NVML does not give their memory per process"
    for p in processes:
        pid = in_our_namespace(p.pid)
        if pid is None and p.pid in ended:
            continue
        if p.usedGpuMemory is None:
            why = why or (f"NVML gives no memory figure for pid {p.pid} on GPU {gpu.minor} (usedGpuMemory not "
                          "available: MPS, or per-process accounting this driver or GPU does not offer)")
        elif pid is None:
            why = why or (f"NVML lists pid {p.pid} ({p.usedGpuMemory} bytes) on GPU {gpu.minor}, which is no process rtd's "
                          "pid namespace can see: NVML reports another namespace's pids (a driver that does not translate "
                          "host pids into a container's)")
        elif pid in watched:
            used[pid] = used.get(pid, 0) + p.usedGpuMemory
    return used, why


class GpuWatch:
    def __init__(self, nvml, gpus: list[Gpu], budgets: dict[str, int], on_kill, on_health,
                 poll_s: float = WATCH_INTERVAL_S, tenant_gpus: dict[str, tuple[int, ...]] | None = None):
        self.nvml, self.gpus, self.budgets = nvml, gpus, dict(budgets)
        self.on_kill, self.on_health, self.poll_s = on_kill, on_health, poll_s
        everything = tuple(g.minor for g in gpus)
        self.tenant_gpus = {t: tuple((tenant_gpus or {}).get(t, everything)) for t in budgets}
        self._lock = threading.Lock()
        self._workers: dict[str, list] = {t: [] for t in budgets}   # tenant -> its live worker handles
        self._since: dict = {}                                       # handle -> when the watcher got it
        self._ended: dict[int, float] = {}                           # pid of a worker that ended -> when it was seen gone
        self._killed: set = set()                                    # handles killed and not yet gone
        self._errors: dict[int, str] = {}                            # GPU minor -> its last NVML error, or why it is blind
        self._blind: set[int] = set()                                # GPUs whose error is blindness
        self._readings: tuple[GpuReading, ...] = ()
        self._next_readings = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rtd-gpu-watch", daemon=True)

    @classmethod
    def start(cls, budgets: dict[str, int], on_kill, on_health, poll_s: float = WATCH_INTERVAL_S,
              tenant_gpus: dict[str, tuple[int, ...]] | None = None) -> "GpuWatch":
        """Initialise NVML, find the GPUs, poll once and start polling; RtdError
        E_LAYER_UNAVAILABLE when NVML does not load or initialise, E_GPU_UNATTRIBUTED when the
        first poll cannot attribute a GPU's memory (blocking: call it off the event loop)."""
        import pynvml   # here, not at the top: only a daemon with a GPU tenant loads it
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            raise RtdError(Code.E_LAYER_UNAVAILABLE, f"NVML: {e}") from None
        try:
            gpus = []
            for index in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                gpus.append(Gpu(pynvml.nvmlDeviceGetMinorNumber(handle), pynvml.nvmlDeviceGetUUID(handle), handle))
        except pynvml.NVMLError as e:
            pynvml.nvmlShutdown()
            raise RtdError(Code.E_LAYER_UNAVAILABLE, f"NVML: {e}") from None
        watch = cls(pynvml, gpus, budgets, on_kill, on_health, poll_s, tenant_gpus)
        watch.poll(time.monotonic())
        blind = watch.blind()
        if blind:
            pynvml.nvmlShutdown()
            raise RtdError(Code.E_GPU_UNATTRIBUTED, "; ".join(blind.values()))
        watch._thread.start()
        return watch

    def watch(self, tenant: str, handle) -> None:
        """Police a worker of `tenant` (a handle with .pid, .alive() and .kill(layer, reason))
        from now until it ends. Any thread."""
        with self._lock:
            self._workers[tenant].append(handle)
            self._since[handle] = time.monotonic()

    def healthy(self, minors) -> bool:
        """Whether NVML answered for each of these GPUs at the last poll, and the watcher could
        attribute their memory (and NVML knows them at all)."""
        known = {g.minor for g in self.gpus}
        with self._lock:
            return all(m in known and m not in self._errors for m in minors)

    def blind(self) -> dict[int, str]:
        """GPU minor -> why its memory cannot be attributed now (empty: every GPU's can)."""
        with self._lock:
            return {m: self._errors[m] for m in self._blind}

    def readings(self) -> tuple[GpuReading, ...]:
        """The GPUs' gauges as last read (never an NVML call: safe on the event loop)."""
        return self._readings

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5.0)
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass   # already shut down with the driver gone: nothing left to release

    def _run(self) -> None:
        wait = self.poll_s
        while not self._stop.wait(wait):
            started = time.monotonic()
            self.poll(started)
            wait = max(0.0, self.poll_s - (time.monotonic() - started))

    def poll(self, started: float) -> list[GpuKill]:
        """One round: every GPU's per-process memory attributed to the workers, then each
        tenant's sum against its budget (what is attributed counts even while a GPU is blind),
        then each GPU's health: NVML's error, or why its memory cannot be attributed."""
        with self._lock:
            watched = {h.pid for handles in self._workers.values() for h in handles if h.alive()}
            for h in [h for h in self._since if h.pid not in watched]:
                self._ended[h.pid] = started
                del self._since[h]
            self._ended = {pid: t for pid, t in self._ended.items() if started - t <= UNLISTED_GRACE_S}
            ended = frozenset(self._ended)
        used: dict[int, int] = {}
        errors: dict[int, str | None] = {}   # per GPU this round: NVML's error, or why it is blind
        blind: set[int] = set()
        for gpu in self.gpus:
            try:
                processes = self.nvml.nvmlDeviceGetComputeRunningProcesses(gpu.handle)
                mps_clients = len(self._mps_clients(gpu))
            except self.nvml.NVMLError as e:
                errors[gpu.minor] = str(e)
                continue
            on_gpu, errors[gpu.minor] = attribution(gpu, processes, mps_clients, watched, ended)
            if errors[gpu.minor]:
                blind.add(gpu.minor)
            for pid, n in on_gpu.items():
                used[pid] = used.get(pid, 0) + n
        kills = []
        with self._lock:
            self._killed = {h for h in self._killed if h.alive()}
            for tenant, handles in self._workers.items():
                handles[:] = [h for h in handles if h.alive()]
                live = [h for h in handles if h not in self._killed]   # a killed worker's memory is being freed
                self._unlisted(tenant, live, used, started, errors, blind)
                total, budget = sum(used.get(h.pid, 0) for h in live), self.budgets[tenant]
                if total <= budget or not live:
                    continue
                victim = max(live, key=lambda h: used.get(h.pid, 0))
                victim.kill("gpu", f"GPU memory: the tenant's workers held {total} bytes, "
                                   f"over its gpu_memory_bytes {budget} (NVML watcher)")
                self._killed.add(victim)
                kills.append(GpuKill(tenant, victim.pid, total, used.get(victim.pid, 0), budget,
                                     round((time.monotonic() - started) * 1000, 3)))
        for minor, error in errors.items():
            self._health(minor, error, minor in blind)
        for kill in kills:
            self.on_kill(kill)
        if started >= self._next_readings:
            self._next_readings = started + METRICS_EVERY_S
            self._read_gauges()
        return kills

    def _mps_clients(self, gpu: Gpu) -> list:
        """The MPS clients NVML lists on this GPU (none where the driver has no such call)."""
        try:
            return self.nvml.nvmlDeviceGetMPSComputeRunningProcesses(gpu.handle)
        except self.nvml.NVMLError_FunctionNotFound:
            return []

    def _unlisted(self, tenant: str, live: list, used: dict, started: float, errors: dict, blind: set) -> None:
        """A worker NVML has not listed for UNLISTED_GRACE_S holds memory nobody counts (its CUDA
        context alone holds some): its tenant's GPUs are blind."""
        for h in live:
            if h.pid in used or started - self._since.get(h, started) <= UNLISTED_GRACE_S:
                continue
            for minor in self.tenant_gpus[tenant]:
                if errors.get(minor, "") is None:
                    blind.add(minor)
                    errors[minor] = (f"NVML lists no memory of worker pid {h.pid} of tenant {tenant} on its GPUs "
                                     f"{list(self.tenant_gpus[tenant])}, though its CUDA context holds some: NVML does not "
                                     "see rtd's workers under their pids")

    def _health(self, minor: int, error: str | None, blind: bool = False) -> None:
        with self._lock:
            before = self._errors.get(minor)
            if error is None:
                self._errors.pop(minor, None)
            else:
                self._errors[minor] = error
            if blind:
                self._blind.add(minor)
            else:
                self._blind.discard(minor)
        if before != error:
            self.on_health(minor, f"cannot attribute GPU memory: {error}" if blind else error)

    def _read_gauges(self) -> None:
        """A gauge NVML cannot read (power on some boards) reads 0, as Triton sets it; health
        is the process poll's business alone, so an unsupported gauge never flaps readiness."""
        readings = []
        for gpu in self.gpus:
            values = []
            for read in (self.nvml.nvmlDeviceGetUtilizationRates, self.nvml.nvmlDeviceGetMemoryInfo,
                         self.nvml.nvmlDeviceGetPowerUsage):
                try:
                    values.append(read(gpu.handle))
                except self.nvml.NVMLError:
                    values.append(None)
            utilization, memory, power_mw = values
            readings.append(GpuReading(gpu.uuid, utilization.gpu * 0.01 if utilization else 0.0,
                                       memory.used if memory else 0, memory.total if memory else 0,
                                       power_mw / 1000 if power_mw is not None else 0.0))
        self._readings = tuple(readings)


def probe() -> str:
    """For rtctl doctor: what NVML says of this host's GPUs, MIG mode included (read, never
    set), whether the processes it lists can be attributed from this pid namespace (the
    watcher refuses to start where they cannot), or why it cannot say. rtd's policies name
    whole GPUs, so a GPU in MIG mode is reported, not used as a per-tenant limit."""
    import pynvml
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        return f"unavailable: NVML: {e} (no watcher: a GPU tenant's memory is not watched)"
    try:
        gpus, blind = [], []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            try:
                mig = "MIG on (rtd does not assign MIG instances)" if pynvml.nvmlDeviceGetMigMode(handle)[0] \
                    == pynvml.NVML_DEVICE_MIG_ENABLE else "MIG off"
            except pynvml.NVMLError:
                mig = "no MIG"
            gpu = Gpu(pynvml.nvmlDeviceGetMinorNumber(handle), pynvml.nvmlDeviceGetUUID(handle), handle)
            try:
                mps = len(pynvml.nvmlDeviceGetMPSComputeRunningProcesses(handle))
            except pynvml.NVMLError_FunctionNotFound:
                mps = 0
            _, why = attribution(gpu, pynvml.nvmlDeviceGetComputeRunningProcesses(handle), mps, set())
            if why:
                blind.append(why)
            gpus.append(f"/dev/nvidia{gpu.minor} {gpu.uuid} {mig}")
        if blind:
            return f"cannot attribute GPU memory: {'; '.join(blind)} (the watcher refuses to start: E_GPU_UNATTRIBUTED)"
        return (f"initialises: {'; '.join(gpus) or 'no GPU'} (every process NVML lists is one this pid namespace sees; "
                f"the watcher polls every {WATCH_INTERVAL_S * 1000:g} ms)")
    except pynvml.NVMLError as e:
        return f"unavailable: NVML: {e}"
    finally:
        pynvml.nvmlShutdown()
