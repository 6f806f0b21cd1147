"""The NVML watcher started for the tenants that name GPUs, its kills and GPU health changes
reported as events, and why it did not start where it could not (gpu_watch.py is the watcher)."""
import asyncio

from rtd.daemon.observe.events import EventLog
from rtd.daemon.observe.gpu_watch import GpuKill, GpuWatch
from rtd.daemon.observe.metrics import Metrics
from rtd.errors import Code, RtdError


async def start_watch(policies: dict, events: EventLog, metrics: Metrics) -> tuple[GpuWatch | None, str]:
    """(the watcher, "") for the tenants whose policy ({tenant: Policy}) names GPUs (off the loop: NVML
    calls block); (None, "") when none does or NVML is absent, the daemon serving without it and
    saying so; (None, why) when NVML runs but its memory is nobody's we can tell: GPU tenants are
    then not ready, no GPU budget being enforceable."""
    budgets = {tid: p.limits.gpu_memory_bytes for tid, p in policies.items() if p.limits.gpu_devices}
    if not budgets:
        return None, ""
    gpus = {tid: policies[tid].limits.gpu_devices for tid in budgets}

    def killed(kill: GpuKill) -> None:   # on the watcher's thread (EventLog is thread-safe)
        events.emit("gpu_kill", kill.tenant, level="warning", pid=kill.pid, tenant_bytes=kill.tenant_bytes,
                    worker_bytes=kill.worker_bytes, budget_bytes=kill.budget_bytes, latency_ms=kill.latency_ms)

    def health(minor: int, error: str | None) -> None:
        events.emit("gpu_health", level="error" if error else "info", gpu=minor, state=f"unhealthy: {error}" if error else "healthy")
    try:
        watch = await asyncio.get_running_loop().run_in_executor(
            None, lambda: GpuWatch.start(budgets, killed, health, tenant_gpus=gpus))
    except RtdError as e:
        if e.code is Code.E_GPU_UNATTRIBUTED:
            events.emit("gpu_watch_refused", level="error", code=e.code.name, reason=e.detail,
                        detail="GPU tenants' models are not ready: no GPU budget can be enforced")
            return None, e.detail
        events.emit("gpu_watch_unavailable", level="error", reason=e.detail,
                    detail="GPU tenants' memory is not watched; rtctl doctor says which limit holds")
        return None, ""
    metrics.gpu_source = watch.readings
    events.emit("gpu_watch", gpus=",".join(f"{g.minor}:{g.uuid}" for g in watch.gpus),
                tenants=",".join(sorted(budgets)), poll_ms=watch.poll_s * 1000)
    return watch, ""
