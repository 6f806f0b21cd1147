"""Per-step timings of profiled runs, summarised per op and written as Chrome trace events."""
import os
import threading


class Profile:
    """One run's steps: (label, start ns, end ns), in order."""

    def __init__(self):
        self.steps = []
        self.thread = threading.get_ident()

    def record(self, label: str, start: int, end: int) -> None:
        self.steps.append((label, start, end))

    def events(self, run: int = 0) -> list:
        """Complete ("X") events in microseconds, one per step, plus one for the whole run."""
        if not self.steps:
            return []
        pid, tid = os.getpid(), self.thread
        first, last = self.steps[0][1], self.steps[-1][2]
        out = [{"name": f"run {run}", "ph": "X", "ts": first / 1e3, "dur": (last - first) / 1e3, "pid": pid, "tid": tid, "cat": "run"}]
        out += [{"name": label, "ph": "X", "ts": s / 1e3, "dur": (e - s) / 1e3, "pid": pid, "tid": tid, "cat": "op"}
                for label, s, e in self.steps]
        return out

    @staticmethod
    def merge(profiles: list) -> dict:
        summary: dict = {}
        for profile in profiles:
            for label, start, end in profile.steps:
                entry = summary.setdefault(label, {"calls": 0, "total_us": 0.0})
                entry["calls"] += 1
                entry["total_us"] += (end - start) / 1e3
        return dict(sorted(summary.items(), key=lambda kv: -kv[1]["total_us"]))
