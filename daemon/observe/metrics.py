"""Prometheus metrics, written by hand in the text exposition format so that names match
Triton's exactly (its prometheus-cpp serializer adds no `_total`): Triton's per-model
inference counters and pending gauge, labelled model and version as Triton does plus
tenant; Triton's CPU gauges, and its GPU gauges (labelled gpu_uuid) where the NVML watcher
runs; and rtd's own under `rtd_*` — verification refusals by code,
budget refusals by resource, instance ends by kind, evictions, and, read from the
supervisor's status when scraped, memory and live instances per tenant and model and
what each budget holds.

A model version's series exists from the moment it serves until it is replaced or the
model is unloaded; requests for names a tenant does not serve create none. The same
series answer the ModelStatistics RPC (`statistics`). Everything here runs on the event
loop: counts are plain integers, no locks."""
import collections
import dataclasses
import time

# (Series field, name, HELP): Triton core src/metrics.cc, word for word. Durations are kept
# in ns (for ModelStatistics) and written in µs, as Triton's counters are.
COUNTERS = (
    ("success", "nv_inference_request_success", "Number of successful inference requests, all batch sizes"),
    ("count", "nv_inference_count", "Number of inferences performed (does not include cached requests)"),
    ("exec_count", "nv_inference_exec_count", "Number of model executions performed (does not include cached requests)"),
    ("request_ns", "nv_inference_request_duration_us",
     "Cumulative inference request duration in microseconds (includes cached requests)"),
    ("queue_ns", "nv_inference_queue_duration_us",
     "Cumulative inference queuing duration in microseconds (includes cached requests)"),
    ("input_ns", "nv_inference_compute_input_duration_us",
     "Cumulative compute input duration in microseconds (does not include cached requests)"),
    ("infer_ns", "nv_inference_compute_infer_duration_us",
     "Cumulative compute inference duration in microseconds (does not include cached requests)"),
    ("output_ns", "nv_inference_compute_output_duration_us",
     "Cumulative inference compute output duration in microseconds (does not include cached requests)"),
)
FAILURE = ("nv_inference_request_failure", "Number of failed inference requests, all batch sizes")
PENDING = ("nv_inference_pending_request_count", "Instantaneous number of pending requests awaiting execution per-model.")
REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")   # Triton's failure reasons, each series starts at 0
CPU = (("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]"),
       ("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes"),
       ("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes"))
# Triton's GPU gauges (TRITON_ENABLE_METRICS_GPU), labelled gpu_uuid; read from NVML by daemon/gpu_watch.py
GPU = (("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)", "utilization"),
       ("nv_gpu_memory_total_bytes", "GPU total memory, in bytes", "memory_total_bytes"),
       ("nv_gpu_memory_used_bytes", "GPU used memory, in bytes", "memory_used_bytes"),
       ("nv_gpu_power_usage", "GPU power usage in watts", "power_watts"))
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclasses.dataclass
class Series:
    """One model version's counts (durations in ns)."""
    success: int = 0
    count: int = 0
    exec_count: int = 0
    request_ns: int = 0
    queue_ns: int = 0
    input_ns: int = 0
    infer_ns: int = 0
    output_ns: int = 0
    fail_ns: int = 0
    pending: int = 0
    last_inference_ms: int = 0
    failure: dict = dataclasses.field(default_factory=lambda: dict.fromkeys(REASONS, 0))


class Timing:
    """One request's way through the daemon (time.monotonic() seconds) in Triton's phases:
    queued from `start` until `compute_start` (it holds a slot and an instance); compute input
    until its bytes are sent to the worker (`input_end`) plus the worker's decoding; compute
    infer, the worker's answer time less its decoding and encoding; compute output, the
    worker's encoding plus what follows its answer until the response is handed to the
    transport. While queued it counts in its model version's pending gauge; requests sent in
    one frame share the frame's times."""

    def __init__(self, start: float):
        self.start = start
        self.compute_start = self.input_end = self.output_start = None
        self.decode_s = self.encode_s = 0.0
        self.series: Series | None = None
        self._queued = False

    def queue_in(self, series: Series) -> None:
        self.series, self._queued = series, True
        series.pending += 1

    def dequeue(self) -> None:
        """Idempotent: once computing starts, or when the request ends without it."""
        if self._queued:
            self._queued = False
            self.series.pending -= 1

    def computing(self, *others: "Timing") -> None:
        """This request (and `others` sent in the same frame) holds a slot and an instance."""
        self.compute_start = time.monotonic()
        for timing in (self, *others):
            timing.dequeue()

    def sent(self) -> None:
        self.input_end = time.monotonic()

    def answered(self, worker_ns: dict) -> None:
        """The worker's answer is back, with its decode/run/encode times (bounded by the wait)."""
        self.output_start = time.monotonic()
        span = max(0.0, self.output_start - self.input_end)
        self.decode_s = min(worker_ns["decode"] / 1e9, span)
        self.encode_s = min(worker_ns["encode"] / 1e9, span - self.decode_s)

    def took(self, frame: "Timing") -> None:
        """This request ran in `frame`'s frame: its compute phases are the frame's."""
        self.compute_start, self.input_end, self.output_start = frame.compute_start, frame.input_end, frame.output_start
        self.decode_s, self.encode_s = frame.decode_s, frame.encode_s


def _cpu_times() -> tuple[int, int]:
    """(busy, idle) jiffies from /proc/stat's aggregate line, counted as Triton counts them."""
    with open("/proc/stat") as f:
        user, nice, system, idle, iowait, irq, softirq, steal = (int(v) for v in f.readline().split()[1:9])
    return user + nice + system + irq + softirq + steal, idle + iowait


def _memory() -> tuple[int, int]:
    """(total, used) bytes; used = MemTotal - MemAvailable, as Triton takes it."""
    info = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, value = line.split(":", 1)
            info[key] = int(value.split()[0]) * 1024
    return info["MemTotal"], info["MemTotal"] - info["MemAvailable"]


BACKSLASH = "\\"


def _escape(value: str) -> str:
    return value.replace(BACKSLASH, BACKSLASH * 2).replace("\n", "\\n").replace('"', '\\"')


def _number(value) -> str:
    if isinstance(value, float) and not value.is_integer():
        return repr(value)
    return str(int(value))


class Exposition:
    """The text format: each family's HELP and TYPE once, then its samples, labels sorted by
    name as prometheus-cpp writes them."""

    def __init__(self):
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str, samples) -> None:
        self.lines += [f"# HELP {name} {help_text.replace(BACKSLASH, BACKSLASH * 2)}", f"# TYPE {name} {kind}"]
        for labels, value in samples:
            text = ",".join(f'{k}="{_escape(str(v))}"' for k, v in sorted(labels.items()))
            self.lines.append(f"{name}{{{text}}} {_number(value)}" if text else f"{name} {_number(value)}")

    def text(self) -> bytes:
        return ("\n".join(self.lines) + "\n").encode()


class Metrics:
    def __init__(self):
        self.series: dict[tuple, Series] = {}                        # (tenant, model, version) -> counts
        self.refusals: collections.Counter = collections.Counter()   # (tenant, code) -> n
        self.budgets: collections.Counter = collections.Counter()    # (who, resource) -> n
        self.ends: collections.Counter = collections.Counter()       # (tenant, model, ending) -> n
        self.evictions: collections.Counter = collections.Counter()  # (tenant, model) -> n
        self.status_source = None
        self.gpu_source = None   # the NVML watcher's cached readings, when it runs: GPU gauges absent otherwise
        self.cpu_last = _cpu_times()

    # -- series (on the event loop) ------------------------------------------------------------
    def track(self, tenant: str, model: str, version: str) -> Series:
        """The series of a version that serves from now on (kept if it already has one)."""
        key = (tenant, model, version)
        series = self.series.get(key)   # asked every request: a Series is made only the first time
        if series is None:
            series = self.series[key] = Series()
        return series

    def find(self, tenant: str, model: str, version: str) -> Series | None:
        return self.series.get((tenant, model, version))

    @staticmethod
    def succeeded(series: Series, timing: Timing, batch: int, end: float) -> None:
        start, sent, back = timing.compute_start, timing.input_end, timing.output_start
        series.success += 1
        series.count += batch
        series.request_ns += int((end - timing.start) * 1e9)
        series.queue_ns += int((start - timing.start) * 1e9)
        series.input_ns += int((sent - start + timing.decode_s) * 1e9)
        series.infer_ns += int((back - sent - timing.decode_s - timing.encode_s) * 1e9)
        series.output_ns += int((end - back + timing.encode_s) * 1e9)

    @staticmethod
    def executed(series: Series | None) -> None:
        """One execution in a worker (a batch is one); none is counted for a version gone meanwhile."""
        if series is None:
            return
        series.exec_count += 1
        series.last_inference_ms = max(series.last_inference_ms, int(time.time() * 1000))

    @staticmethod
    def failed(series: Series, reason: str, duration_s: float) -> None:
        series.failure[reason] += 1
        series.fail_ns += int(duration_s * 1e9)

    def refused(self, tenant: str, code: str) -> None:
        self.refusals[(tenant, code)] += 1

    def budget_refused(self, who: str, resource: str) -> None:
        self.budgets[(who, resource)] += 1

    def instance_ended(self, tenant: str, model: str, ending: str) -> None:
        self.ends[(tenant, model, ending)] += 1

    def evicted(self, tenant: str, model: str) -> None:
        self.evictions[(tenant, model)] += 1

    def forget(self, tenant: str, model: str, version: str | None = None) -> None:
        """Remove the series of an unloaded model (or of one replaced version of it)."""
        for key in [k for k in self.series if k[:2] == (tenant, model) and version in (None, k[2])]:
            del self.series[key]
        if version is None:
            for key in [k for k in self.ends if k[:2] == (tenant, model)]:
                del self.ends[key]
            self.evictions.pop((tenant, model), None)

    # -- read when scraped ---------------------------------------------------------------------
    def statistics(self, tenant: str, model: str = "", version: str = "") -> list[tuple[str, str, Series]]:
        """(model, version, counts) of the tenant's series, by name and version when given."""
        return [(m, v, s) for (t, m, v), s in sorted(self.series.items())
                if t == tenant and (not model or m == model) and (not version or v == version)]

    def exposition(self) -> bytes:
        out = Exposition()
        series = sorted(self.series.items())

        def model(key):
            return {"tenant": key[0], "model": key[1], "version": key[2]}
        out.family(FAILURE[0], "counter", FAILURE[1], [({**model(k), "reason": r}, n) for k, s in series for r, n in s.failure.items()])
        for field, name, help_text in COUNTERS:
            scale = 1000 if field.endswith("_ns") else 1
            out.family(name, "counter", help_text, [(model(k), getattr(s, field) // scale) for k, s in series])
        out.family(PENDING[0], "gauge", PENDING[1], [(model(k), s.pending) for k, s in series])
        busy, idle = _cpu_times()
        last_busy, last_idle = self.cpu_last
        self.cpu_last = busy, idle
        spent = max(busy - last_busy, 0) + max(idle - last_idle, 0)
        total, used = _memory()
        for (name, help_text), value in zip(CPU, (max(busy - last_busy, 0) / spent if spent else 0.0, total, used)):
            out.family(name, "gauge", help_text, [({}, value)])
        if self.gpu_source is not None:
            readings = self.gpu_source()
            for name, help_text, field in GPU:
                out.family(name, "gauge", help_text, [({"gpu_uuid": r.uuid}, getattr(r, field)) for r in readings])
        self._own(out)
        return out.text()

    def _own(self, out: Exposition) -> None:
        def counted(counter, names):
            return [(dict(zip(names, key)), n) for key, n in sorted(counter.items())]
        out.family("rtd_verification_refusals_total", "counter", "Package loads refused, by code",
                   counted(self.refusals, ("tenant", "code")))
        out.family("rtd_budget_refusals_total", "counter", "Requests refused by a budget",
                   counted(self.budgets, ("tenant", "resource")))
        out.family("rtd_instance_ends_total", "counter",
                   "Model instances that ended unasked: crashed, resource (memory or GPU memory layer) or hung",
                   counted(self.ends, ("tenant", "model", "ending")))
        out.family("rtd_evictions_total", "counter", "Idle instances evicted to make room",
                   counted(self.evictions, ("tenant", "model")))
        status = self.status_source() if self.status_source else {"tenants": [], "budgets": {}}
        memory, instances, budgets = [], [], []
        for tenant in status["tenants"]:
            used = 0
            for name, view in tenant["models"].items():
                live = [i for i in (view["serving"] or {}).get("instances", []) if i["live"]]
                used += sum(i["memory_bytes"] or 0 for i in live)
                instances.append(({"tenant": tenant["tenant"], "model": name}, len(live)))
            memory.append(({"tenant": tenant["tenant"]}, used))
            budgets += [({"who": tenant["tenant"], "resource": r}, a["used"]) for r, a in tenant["budgets"].items()]
        budgets += [({"who": "(supervisor)", "resource": r}, a["used"]) for r, a in status["budgets"].items()]
        out.family("rtd_tenant_memory_bytes", "gauge", "Memory charged to the tenant's instances' cgroups", memory)
        out.family("rtd_model_instances", "gauge", "Live instances per model", instances)
        out.family("rtd_budget_used", "gauge", "What each budget holds", budgets)
