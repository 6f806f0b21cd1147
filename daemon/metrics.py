"""Prometheus metrics: Triton's per-model names (labelled model, version, tenant) plus rtd's
own — verification refusals by code, budget refusals by resource, instance ends by kind,
evictions — and, read from the supervisor's status when scraped, memory and live instances
per tenant and model and what each budget holds. A model's series go when it is unloaded.
One private registry, served on a loopback port (default 8002) by prometheus-client."""
from prometheus_client import CollectorRegistry, Counter, start_http_server
from prometheus_client.core import GaugeMetricFamily

MODEL = ("model", "version", "tenant")


class Metrics:
    def __init__(self):
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.success = Counter("nv_inference_request_success", "Successful inference requests", MODEL, registry=r)
        self.failure = Counter("nv_inference_request_failure", "Failed inference requests", MODEL + ("reason",), registry=r)
        self.count = Counter("nv_inference_count", "Inferences performed (batch elements)", MODEL, registry=r)
        self.exec_count = Counter("nv_inference_exec_count", "Model executions", MODEL, registry=r)
        self.request_us = Counter("nv_inference_request_duration_us", "Cumulative request duration", MODEL, registry=r)
        self.queue_us = Counter("nv_inference_queue_duration_us", "Cumulative queue duration", MODEL, registry=r)
        self.compute_us = Counter("nv_inference_compute_infer_duration_us", "Cumulative compute duration", MODEL, registry=r)
        self.refusals = Counter("rtd_verification_refusals", "Package loads refused, by code", ("tenant", "code"), registry=r)
        self.budgets = Counter("rtd_budget_refusals", "Requests refused by a budget", ("tenant", "resource"), registry=r)
        self.ends = Counter("rtd_instance_ends", "Model instances that ended unasked: crashed, resource (memory "
                            "layer) or hung", ("tenant", "model", "ending"), registry=r)
        self.evictions = Counter("rtd_evictions", "Idle instances evicted to make room", ("tenant", "model"), registry=r)
        self.status_source = None
        self.series: dict[tuple, set] = {}   # (tenant, model) -> every (metric, labels) it has
        self.children: dict[tuple, object] = {}
        r.register(self)

    def _child(self, metric, tenant: str, model: str, *labels):
        key = (metric, labels)
        child = self.children.get(key)
        if child is None:   # labels() costs ~10 µs a call; each series is looked up once
            child = self.children[key] = metric.labels(*labels)
            self.series.setdefault((tenant, model), set()).add(key)
        return child

    # -- events -------------------------------------------------------------------------------
    def inferred(self, tenant: str, model: str, version: str, batch: int, total_s: float, queue_s: float) -> None:
        labels = (model, version, tenant)
        self._child(self.success, tenant, model, *labels).inc()
        self._child(self.count, tenant, model, *labels).inc(batch)
        self._child(self.request_us, tenant, model, *labels).inc(total_s * 1e6)
        self._child(self.queue_us, tenant, model, *labels).inc(queue_s * 1e6)
        self._child(self.compute_us, tenant, model, *labels).inc((total_s - queue_s) * 1e6)

    def executed(self, tenant: str, model: str, version: str, rows: int = 1) -> None:
        self._child(self.exec_count, tenant, model, model, version, tenant).inc()

    def failed(self, tenant: str, model: str, version: str, reason: str) -> None:
        self._child(self.failure, tenant, model, model, version, tenant, reason).inc()

    def refused(self, tenant: str, code: str) -> None:
        self.refusals.labels(tenant, code).inc()

    def budget_refused(self, who: str, resource: str) -> None:
        self.budgets.labels(who, resource).inc()

    def instance_ended(self, tenant: str, model: str, ending: str) -> None:
        self._child(self.ends, tenant, model, tenant, model, ending).inc()

    def evicted(self, tenant: str, model: str) -> None:
        self._child(self.evictions, tenant, model, tenant, model).inc()

    def forget(self, tenant: str, model: str) -> None:
        """Remove every series of an unloaded model."""
        for metric, labels in self.series.pop((tenant, model), ()):
            self.children.pop((metric, labels), None)
            try:
                metric.remove(*labels)
            except KeyError:
                pass

    # -- read when scraped (prometheus-client's collector protocol) --------------------------
    def _families(self):
        return (GaugeMetricFamily("rtd_tenant_memory_bytes", "Memory charged to the tenant's instances' cgroups",
                                  labels=["tenant"]),
                GaugeMetricFamily("rtd_model_instances", "Live instances per model", labels=["tenant", "model"]),
                GaugeMetricFamily("rtd_budget_used", "What each budget holds", labels=["who", "resource"]))

    def describe(self):
        return list(self._families())

    def collect(self):
        memory, instances, budgets = self._families()
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

    def serve(self, address: str, port: int):
        """Start the HTTP listener; returns (server, thread)."""
        return start_http_server(port, addr=address, registry=self.registry)
