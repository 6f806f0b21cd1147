"""What the serving objects of one tenant use, handed to them when they are built: its id, the
daemon's limits and its own sandbox limits, the event log and metrics, how to spawn one of its
workers, its memory accounting and its slots. Tenancy, model owners, versions and schedulers
get this and never their parent, so every reach is visible here.
"""
import dataclasses

from rtd.daemon.config import Limits
from rtd.daemon.observe.events import EventLog
from rtd.daemon.observe.metrics import Metrics
from rtd.daemon.serving.scheduler import Slots


@dataclasses.dataclass(frozen=True)
class TenantServices:
    tenant: str
    limits: Limits                  # the daemon's limits (systemd/rtd.toml [limits])
    policy_limits: object           # the tenant's sandbox limits (rtd.sandbox policy: memory, cores, GPUs)
    events: EventLog
    metrics: Metrics
    spawn: object                   # (socket) -> worker handle: a confined worker of this tenant (blocking)
    make_room: object               # async (need bytes, need pids, keep version, claim) -> None: evict idle instances and count the new one, or refuse
    slots: Slots                    # the tenant's max_concurrency requests in its workers
    models: object = None           # (name) -> ManagedModel | None: the tenant's own models (an ensemble's steps)

    def emit(self, event: str, level: str = "info", **fields) -> None:
        self.events.emit(event, self.tenant, level=level, **fields)

    @property
    def threads(self) -> int:
        """Kernel threads a worker may run: the tenant's whole CPU cores."""
        return max(1, int(self.policy_limits.cpu_cores))

    @property
    def device(self) -> str:
        return "cuda" if self.policy_limits.gpu_devices else "cpu"
