"""The daemon's log: one line per event (start, load, refusal with its code, state change,
crash, restart, eviction, budget refusal, reload, stop), `key=value` pairs naming the
tenant and model, on stderr where journald reads it (with a syslog priority prefix when it
does). Values are bounded and single-line; tokens and keys are never passed in. Lines are
rate-limited per tenant (a token bucket), so one tenant cannot flood the log; what was
dropped is counted on that tenant's next line."""
import os
import sys
import threading
import time

PRIORITY = {"error": 3, "warning": 4, "info": 6}
MAX_VALUE = 200


def _value(v) -> str:
    text = str(v).replace("\n", " ").replace("\r", " ")[:MAX_VALUE]
    if not text or any(c in text for c in ' ="'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


class EventLog:
    def __init__(self, stream=None, rate_per_s: float = 20.0, burst: int = 100):
        self.stream = stream or sys.stderr
        self.journal = bool(os.environ.get("JOURNAL_STREAM"))
        self.rate, self.burst = rate_per_s, burst
        self.buckets: dict[str, list] = {}   # tenant -> [tokens, last refill, suppressed]
        self.lock = threading.Lock()

    def _allowed(self, tenant: str) -> int | None:
        """None when this line is dropped; otherwise how many were dropped before it."""
        now = time.monotonic()
        with self.lock:
            bucket = self.buckets.setdefault(tenant, [float(self.burst), now, 0])
            bucket[0] = min(self.burst, bucket[0] + (now - bucket[1]) * self.rate)
            bucket[1] = now
            if bucket[0] < 1:
                bucket[2] += 1
                return None
            bucket[0] -= 1
            dropped, bucket[2] = bucket[2], 0
            return dropped

    def emit(self, event: str, tenant: str | None = None, level: str = "info", **fields) -> None:
        dropped = self._allowed(tenant or "-")
        if dropped is None:
            return
        parts = [f"event={_value(event)}"] + ([f"tenant={_value(tenant)}"] if tenant else [])
        parts += [f"{k}={_value(v)}" for k, v in fields.items() if v is not None and v != ""]
        if dropped:
            parts.append(f"suppressed={dropped}")
        prefix = f"<{PRIORITY[level]}>" if self.journal else ""
        try:
            self.stream.write(f"{prefix}rtd: {' '.join(parts)}\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass   # a closed or full stderr must not take the daemon down
