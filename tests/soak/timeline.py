"""When the chaos did something the calm tenant may notice, so that each failure of a calm
request is either excused by one of these moments or is a refusal (a violation).

Three kinds of moments: the supervisor down (from its kill -9 until the restart checks are
done), one of the calm tenant's own workers SIGKILLed (requests in flight on it fail), and
the state disk full (its loads and unloads are refused E_STORAGE_FULL, and change nothing).
Nothing else excuses anything: a budget refusal, a deadline, a wrong answer or the
daemon's own E_INTERNAL is a violation however the chaos was going at the time."""
import threading
import time

from rtd.errors import Code, RtdError
from tests.soak.tally import no_answer

WORKER_GONE = (Code.E_WORKER_CRASHED, Code.E_SANDBOX_KILLED)
# A request sent just after a kill still reaches the dead worker until the supervisor has
# seen its socket close: milliseconds normally, more on a loaded 2-core host.
KILL_NOTICE_S = 2.0
KEEP_S = 600.0   # moments older than any calm request's deadline are forgotten (long runs)


class Timeline:
    def __init__(self):
        self.lock = threading.Lock()
        self.down: list[list] = []        # [start, end or None]
        self.full: list[list] = []
        self.calm_kills: list[float] = []

    def _begin(self, spans: list) -> None:
        with self.lock:
            if not spans or spans[-1][1] is not None:
                spans.append([time.monotonic(), None])
            self._forget()

    def _end(self, spans: list) -> None:
        with self.lock:
            if spans and spans[-1][1] is None:
                spans[-1][1] = time.monotonic()

    def _forget(self) -> None:
        old = time.monotonic() - KEEP_S
        for spans in (self.down, self.full):
            spans[:] = [s for s in spans if s[1] is None or s[1] > old]
        self.calm_kills[:] = [t for t in self.calm_kills if t > old]

    def daemon_down(self) -> None:
        self._begin(self.down)

    def daemon_up(self) -> None:
        self._end(self.down)

    def disk_full(self) -> None:
        self._begin(self.full)

    def disk_emptied(self) -> None:
        self._end(self.full)

    def calm_worker_killed(self) -> None:
        with self.lock:
            self.calm_kills.append(time.monotonic())

    @staticmethod
    def _overlaps(spans: list, start: float, end: float) -> bool:
        return any(s <= end and (e is None or e >= start) for s, e in spans)

    def excuse(self, error: RtdError, start: float, end: float) -> str | None:
        """Why a calm request that ran from `start` to `end` may have failed so, or None."""
        with self.lock:
            if no_answer(error) and self._overlaps(self.down, start, end):
                return "daemon down"
            if error.code in WORKER_GONE and any(start - KILL_NOTICE_S <= t <= end for t in self.calm_kills):
                return "worker killed"
            if error.code == Code.E_STORAGE_FULL and self._overlaps(self.full, start, end):
                return "disk full"
        return None
