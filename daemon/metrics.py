"""Prometheus metrics: Triton's per-model names (labelled model, version, tenant) plus rtd's
own — verification refusals by code, budget refusals by resource, instance ends by kind,
evictions — and, read from the supervisor's status when scraped, memory and live instances
per tenant and model and what each budget holds. A model's series go when it is unloaded.

Per-model counts are plain numbers the event loop adds to (a prometheus-client Counter
takes a lock per increment: six of them were a tenth of a small request's cost) and are
read by the collector when scraped. One private registry, served on a loopback port
(default 8002) by metrics_listener on the event loop, where the collector runs too."""
import collections
import dataclasses

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

MODEL = ["model", "version", "tenant"]
TRITON = (("success", "nv_inference_request_success", "Successful inference requests"),
          ("count", "nv_inference_count", "Inferences performed (batch elements)"),
          ("exec_count", "nv_inference_exec_count", "Model executions"),
          ("request_us", "nv_inference_request_duration_us", "Cumulative request duration"),
          ("queue_us", "nv_inference_queue_duration_us", "Cumulative queue duration"),
          ("compute_us", "nv_inference_compute_infer_duration_us", "Cumulative compute duration"))


@dataclasses.dataclass
class _Series:
    """One model version's counts."""
    success: int = 0
    count: int = 0
    exec_count: int = 0
    request_us: float = 0.0
    queue_us: float = 0.0
    compute_us: float = 0.0
    failure: collections.Counter = dataclasses.field(default_factory=collections.Counter)   # reason -> n


class Metrics:
    def __init__(self):
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.refusals = Counter("rtd_verification_refusals", "Package loads refused, by code", ("tenant", "code"), registry=r)
        self.budgets = Counter("rtd_budget_refusals", "Requests refused by a budget", ("tenant", "resource"), registry=r)
        self.series: dict[tuple, _Series] = {}                 # (model, version, tenant) -> counts
        self.ends: collections.Counter = collections.Counter()  # (tenant, model, ending) -> n
        self.evictions: collections.Counter = collections.Counter()  # (tenant, model) -> n
        self.status_source = None
        r.register(self)

    def _series(self, tenant: str, model: str, version: str) -> _Series:
        key = (model, version, tenant)
        series = self.series.get(key)
        if series is None:
            series = self.series[key] = _Series()
        return series

    # -- events (on the event loop) ----------------------------------------------------------
    def inferred(self, tenant: str, model: str, version: str, batch: int, total_s: float, queue_s: float) -> None:
        s = self._series(tenant, model, version)
        s.success += 1
        s.count += batch
        s.request_us += total_s * 1e6
        s.queue_us += queue_s * 1e6
        s.compute_us += (total_s - queue_s) * 1e6

    def executed(self, tenant: str, model: str, version: str, rows: int = 1) -> None:
        self._series(tenant, model, version).exec_count += 1

    def failed(self, tenant: str, model: str, version: str, reason: str) -> None:
        self._series(tenant, model, version).failure[reason] += 1

    def refused(self, tenant: str, code: str) -> None:
        self.refusals.labels(tenant, code).inc()

    def budget_refused(self, who: str, resource: str) -> None:
        self.budgets.labels(who, resource).inc()

    def instance_ended(self, tenant: str, model: str, ending: str) -> None:
        self.ends[(tenant, model, ending)] += 1

    def evicted(self, tenant: str, model: str) -> None:
        self.evictions[(tenant, model)] += 1

    def forget(self, tenant: str, model: str) -> None:
        """Remove every series of an unloaded model."""
        for key in [k for k in self.series if k[0] == model and k[2] == tenant]:
            del self.series[key]
        for key in [k for k in self.ends if k[:2] == (tenant, model)]:
            del self.ends[key]
        self.evictions.pop((tenant, model), None)

    # -- read when scraped (prometheus-client's collector protocol) --------------------------
    def _gauges(self):
        return (GaugeMetricFamily("rtd_tenant_memory_bytes", "Memory charged to the tenant's instances' cgroups",
                                  labels=["tenant"]),
                GaugeMetricFamily("rtd_model_instances", "Live instances per model", labels=["tenant", "model"]),
                GaugeMetricFamily("rtd_budget_used", "What each budget holds", labels=["who", "resource"]))

    def _counters(self):
        return ({field: CounterMetricFamily(name, help_text, labels=MODEL) for field, name, help_text in TRITON},
                CounterMetricFamily("nv_inference_request_failure", "Failed inference requests", labels=MODEL + ["reason"]),
                CounterMetricFamily("rtd_instance_ends", "Model instances that ended unasked: crashed, resource "
                                    "(memory layer) or hung", labels=["tenant", "model", "ending"]),
                CounterMetricFamily("rtd_evictions", "Idle instances evicted to make room", labels=["tenant", "model"]))

    def describe(self):
        counters, failure, ends, evictions = self._counters()
        return [*counters.values(), failure, ends, evictions, *self._gauges()]

    def collect(self):
        counters, failure, ends, evictions = self._counters()
        for labels, s in list(self.series.items()):   # a snapshot: the event loop keeps counting
            for field, family in counters.items():
                family.add_metric(list(labels), getattr(s, field))
            for reason, n in list(s.failure.items()):
                failure.add_metric([*labels, reason], n)
        for labels, n in list(self.ends.items()):
            ends.add_metric(list(labels), n)
        for labels, n in list(self.evictions.items()):
            evictions.add_metric(list(labels), n)
        yield from (*counters.values(), failure, ends, evictions)
        memory, instances, budgets = self._gauges()
        status = self.status_source() if self.status_source else {"tenants": [], "budgets": {}}
        for tenant in status["tenants"]:
            used = 0
            for name, model in tenant["models"].items():
                live = [i for i in (model["serving"] or {}).get("instances", []) if i["live"]]
                used += sum(i["memory_bytes"] or 0 for i in live)
                instances.add_metric([tenant["tenant"], name], len(live))
            memory.add_metric([tenant["tenant"]], used)
            for resource, account in tenant["budgets"].items():
                budgets.add_metric([tenant["tenant"], resource], account["used"])
        for resource, account in status["budgets"].items():
            budgets.add_metric(["(supervisor)", resource], account["used"])
        yield from (memory, instances, budgets)
