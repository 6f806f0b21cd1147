"""The supervisor's NVML watcher (nvidia-ml-py): the GPU memory limit of last resort, and
the source of the GPU metrics and GPU health.

Every `poll_s` (5 ms; the design promises ≤ 10) it asks NVML, per GPU, for the memory each
process uses (nvmlDeviceGetComputeRunningProcesses; host pids, as the zygote reports its
workers'), sums it per tenant over the tenant's live workers, and when a tenant's sum
passes its `gpu_memory_bytes` SIGKILLs that tenant's largest worker with layer "gpu", so
its exit status reads E_SANDBOX_KILLED (layer gpu) and the owner counts it as a resource
kill like the memory layer's. It watches every tenant that names GPUs, whichever layer
sandbox/gpu_memory.py puts in force (under MPS it is the only per-tenant sum). It is
detection, not prevention: between two polls a worker can allocate past its budget and
another tenant on the same GPU can hit out-of-memory; a worker's usage includes its CUDA
context. Each kill's latency, from the start of the poll that saw it to the kill, is in
its event line.

NVML calls block, so all of them run on this thread, never on the event loop: the loop
reads only what the thread cached (`readings` for Triton's nv_gpu_* gauges, refreshed
every METRICS_EVERY_S; `healthy` for readiness). A GPU whose process query fails is
unhealthy until one succeeds again. Without NVML (no library, no driver) `start` refuses and the
daemon runs without the watcher; `rtctl doctor` says so."""
import dataclasses
import threading
import time

from rtd.errors import Code, RtdError
from rtd.sandbox.gpu_memory import WATCH_INTERVAL_S

METRICS_EVERY_S = 1.0


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


class GpuWatch:
    def __init__(self, nvml, gpus: list[Gpu], budgets: dict[str, int], on_kill, on_health,
                 poll_s: float = WATCH_INTERVAL_S):
        self.nvml, self.gpus, self.budgets = nvml, gpus, dict(budgets)
        self.on_kill, self.on_health, self.poll_s = on_kill, on_health, poll_s
        self._lock = threading.Lock()
        self._workers: dict[str, list] = {t: [] for t in budgets}   # tenant -> its live worker handles
        self._killed: set = set()                                    # handles killed and not yet gone
        self._errors: dict[int, str] = {}                            # GPU minor -> its last NVML error
        self._readings: tuple[GpuReading, ...] = ()
        self._next_readings = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rtd-gpu-watch", daemon=True)

    @classmethod
    def start(cls, budgets: dict[str, int], on_kill, on_health, poll_s: float = WATCH_INTERVAL_S) -> "GpuWatch":
        """Initialise NVML, find the GPUs and start polling; RtdError(E_LAYER_UNAVAILABLE)
        when NVML does not load or initialise (blocking: call it off the event loop)."""
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
        watch = cls(pynvml, gpus, budgets, on_kill, on_health, poll_s)
        watch._thread.start()
        return watch

    def watch(self, tenant: str, handle) -> None:
        """Police a worker of `tenant` (a handle with .pid, .alive() and .kill(layer, reason))
        from now until it ends. Any thread."""
        with self._lock:
            self._workers[tenant].append(handle)

    def healthy(self, minors) -> bool:
        """Whether NVML answered for each of these GPUs at the last poll (and knows them at all)."""
        known = {g.minor for g in self.gpus}
        with self._lock:
            return all(m in known and m not in self._errors for m in minors)

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
        """One round: every GPU's per-process memory, then each tenant's sum against its budget."""
        used: dict[int, int] = {}
        for gpu in self.gpus:
            try:
                processes = self.nvml.nvmlDeviceGetComputeRunningProcesses(gpu.handle)
            except self.nvml.NVMLError as e:
                self._health(gpu.minor, str(e))
                continue
            self._health(gpu.minor, None)
            for p in processes:
                used[p.pid] = used.get(p.pid, 0) + (p.usedGpuMemory or 0)
        kills = []
        with self._lock:
            self._killed = {h for h in self._killed if h.alive()}
            for tenant, handles in self._workers.items():
                handles[:] = [h for h in handles if h.alive()]
                live = [h for h in handles if h not in self._killed]   # a killed worker's memory is being freed
                total, budget = sum(used.get(h.pid, 0) for h in live), self.budgets[tenant]
                if total <= budget or not live:
                    continue
                victim = max(live, key=lambda h: used.get(h.pid, 0))
                victim.kill("gpu", f"GPU memory: the tenant's workers held {total} bytes, "
                                   f"over its gpu_memory_bytes {budget} (NVML watcher)")
                self._killed.add(victim)
                kills.append(GpuKill(tenant, victim.pid, total, used.get(victim.pid, 0), budget,
                                     round((time.monotonic() - started) * 1000, 3)))
        for kill in kills:
            self.on_kill(kill)
        if started >= self._next_readings:
            self._next_readings = started + METRICS_EVERY_S
            self._read_gauges()
        return kills

    def _health(self, minor: int, error: str | None) -> None:
        with self._lock:
            before = self._errors.get(minor)
            if error is None:
                self._errors.pop(minor, None)
            else:
                self._errors[minor] = error
        if before != error:
            self.on_health(minor, error)

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
    set), or why it cannot say. rtd's policies name whole GPUs, so a GPU in MIG mode is
    reported, not used as a per-tenant limit."""
    import pynvml
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        return f"unavailable: NVML: {e} (no watcher: a GPU tenant's memory is not watched)"
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            try:
                mig = "MIG on (rtd does not assign MIG instances)" if pynvml.nvmlDeviceGetMigMode(handle)[0] \
                    == pynvml.NVML_DEVICE_MIG_ENABLE else "MIG off"
            except pynvml.NVMLError:
                mig = "no MIG"
            gpus.append(f"/dev/nvidia{pynvml.nvmlDeviceGetMinorNumber(handle)} {pynvml.nvmlDeviceGetUUID(handle)} {mig}")
        return f"initialises: {'; '.join(gpus) or 'no GPU'} (the watcher polls every {WATCH_INTERVAL_S * 1000:g} ms)"
    except pynvml.NVMLError as e:
        return f"unavailable: NVML: {e}"
    finally:
        pynvml.nvmlShutdown()
