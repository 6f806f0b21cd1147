"""Prometheus metrics: Triton's per-model names (labelled model, version, tenant) plus rtd's
own — verification refusals by code, worker deaths by cause, sandbox kills by layer, and
memory per tenant read from the workers' cgroups at scrape time. One private registry,
served on a loopback port (default 8002) by prometheus-client."""
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
        self.deaths = Counter("rtd_worker_restarts", "Worker deaths that led to a restart, by cause", ("tenant", "cause"), registry=r)
        self.kills = Counter("rtd_sandbox_kills", "Workers killed by a confinement layer", ("tenant", "layer"), registry=r)
        self.memory_source = None
        self.children = {}
        r.register(self)

    def collect(self):
        """Memory per tenant, read when scraped (the collector protocol of prometheus-client)."""
        family = GaugeMetricFamily("rtd_tenant_memory_bytes", "Memory charged to the tenant's worker cgroup", labels=["tenant"])
        for tenant, used in (self.memory_source() if self.memory_source else {}).items():
            family.add_metric([tenant], used)
        yield family

    def describe(self):
        return [GaugeMetricFamily("rtd_tenant_memory_bytes", "Memory charged to the tenant's worker cgroup", labels=["tenant"])]

    def serve(self, address: str, port: int):
        """Start the HTTP listener; returns (server, thread)."""
        return start_http_server(port, addr=address, registry=self.registry)

    # -- events -------------------------------------------------------------------------------
    def inferred(self, model: str, version: str, tenant: str, batch: int, total_s: float, queue_s: float, compute_s: float):
        labels = (model, version, tenant)
        children = self.children.get(labels)
        if children is None:  # labels() costs ~10 µs a call; look each series up once
            children = self.children[labels] = tuple(
                c.labels(*labels) for c in (self.success, self.count, self.request_us, self.queue_us, self.compute_us))
        success, count, request_us, queue_us, compute_us = children
        success.inc()
        count.inc(batch)
        request_us.inc(total_s * 1e6)
        queue_us.inc(queue_s * 1e6)
        compute_us.inc(compute_s * 1e6)

    def executed(self, model: str, version: str, tenant: str):
        self.exec_count.labels(model, version, tenant).inc()

    def failed(self, model: str, version: str, tenant: str, reason: str):
        self.failure.labels(model, version, tenant, reason).inc()

    def refused(self, tenant: str, code: str):
        self.refusals.labels(tenant, code).inc()

    def worker_died(self, tenant: str, cause: str):
        self.deaths.labels(tenant, cause).inc()
        if cause != "crash":
            self.kills.labels(tenant, cause).inc()
