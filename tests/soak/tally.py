"""The soak's counts and the violations of its invariants, shared by every actor: requests
per kind with their outcomes, chaos events, invariant checks run, peaks (RSS, fds), and
the summary printed at the end (and written as JSON for the CI test)."""
import collections
import sys
import threading
import time

from rtd.errors import Code, RtdError

SHOWN_PER_VIOLATION = 3   # the first few messages of each violation are printed as they happen


def no_answer(error: RtdError) -> bool:
    """A call the daemon never answered (the daemon down, the connection cut): the client
    says E_DAEMON_UNREACHABLE, or E_INTERNAL with the gRPC status first in the detail for
    other transport failures, while the daemon's own E_INTERNAL has no detail."""
    return error.code == Code.E_DAEMON_UNREACHABLE or (error.code == Code.E_INTERNAL and bool(error.detail))


def outcome_of(error: RtdError) -> str:
    """The daemon's own code, or `transport:<gRPC status>` for a call that never got one."""
    if error.code == Code.E_DAEMON_UNREACHABLE:
        return "transport:UNAVAILABLE"
    if no_answer(error):
        return "transport:" + error.detail.split(":", 1)[0]
    return error.code.name


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.started = time.monotonic()
        self.requests: collections.Counter = collections.Counter()     # kind -> calls
        self.outcomes: collections.Counter = collections.Counter()     # (kind, outcome) -> calls
        self.events: collections.Counter = collections.Counter()       # chaos events
        self.checks: collections.Counter = collections.Counter()       # invariant -> times checked
        self.violations: collections.Counter = collections.Counter()   # invariant -> times violated
        self.first: dict[str, list[str]] = {}                          # invariant -> first messages
        self.peaks: dict[str, float] = {}
        self.notes: list[str] = []

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def request(self, kind: str, outcome: str = "ok", count: int = 1) -> None:
        with self.lock:
            self.requests[kind] += count
            self.outcomes[(kind, outcome)] += count

    def total_requests(self) -> int:
        with self.lock:
            return sum(self.requests.values())

    def event(self, name: str, count: int = 1) -> None:
        with self.lock:
            self.events[name] += count

    def peak(self, name: str, value: float) -> None:
        with self.lock:
            self.peaks[name] = max(self.peaks.get(name, value), value)

    def note(self, line: str) -> None:
        """Something the reader of the summary must know (a chaos element skipped, and why)."""
        print(f"soak: {line}", file=sys.stderr, flush=True)
        with self.lock:
            self.notes.append(line)

    def check(self, name: str, ok: bool, message: str = "") -> bool:
        with self.lock:
            self.checks[name] += 1
        if not ok:
            self.violation(name, message)
        return ok

    def violation(self, name: str, message: str) -> None:
        line = f"[{self.elapsed():8.1f}s] {message}"
        with self.lock:
            self.violations[name] += 1
            shown = self.first.setdefault(name, [])
            if len(shown) < SHOWN_PER_VIOLATION:
                shown.append(line)
                print(f"soak: VIOLATION {name}: {line}", file=sys.stderr, flush=True)

    def as_dict(self) -> dict:
        with self.lock:
            by_kind = collections.defaultdict(dict)
            for (kind, outcome), n in sorted(self.outcomes.items()):
                by_kind[kind][outcome] = n
            refusals = collections.Counter()
            for (kind, outcome), n in self.outcomes.items():
                if outcome != "ok" and not outcome.startswith("excused"):
                    refusals[(kind.split(".", 1)[0], outcome)] += n
            return {"seconds": round(self.elapsed(), 1), "requests": dict(self.requests),
                    "total_requests": sum(self.requests.values()), "outcomes": dict(by_kind),
                    "refusals": {f"{who} {code}": n for (who, code), n in sorted(refusals.items())},
                    "events": dict(sorted(self.events.items())), "checks": dict(sorted(self.checks.items())),
                    "violations": dict(self.violations), "first_violations": dict(self.first),
                    "peaks": dict(self.peaks), "notes": list(self.notes)}

    def summary(self, header: dict) -> str:
        d = self.as_dict()
        lines = ["== chaos soak summary"]
        lines += [f"  {k}: {v}" for k, v in header.items()]
        rate = d["total_requests"] / max(d["seconds"], 1e-9)
        lines.append(f"  duration: {d['seconds']} s, {d['total_requests']} requests ({rate:.0f}/s)")
        lines.append("  requests per kind (outcomes):")
        for kind in sorted(d["requests"]):
            outcomes = ", ".join(f"{o} {n}" for o, n in sorted(d["outcomes"][kind].items(), key=lambda t: -t[1]))
            lines.append(f"    {kind:<22} {d['requests'][kind]:>9}  ({outcomes})")
        lines.append("  refusals by code:")
        lines += [f"    {k:<40} {n:>9}" for k, n in d["refusals"].items()] or ["    none"]
        lines.append("  chaos events: " + (", ".join(f"{k} {n}" for k, n in d["events"].items()) or "none"))
        lines.append("  invariant checks run: " + ", ".join(f"{k} {n}" for k, n in d["checks"].items()))
        lines.append("  peaks: " + ", ".join(f"{k} {v:g}" for k, v in sorted(d["peaks"].items())))
        lines += [f"  note: {n}" for n in d["notes"]]
        if d["violations"]:
            lines.append("  VIOLATIONS:")
            for name, n in d["violations"].items():
                lines.append(f"    {name}: {n}")
                lines += [f"      {m}" for m in d["first_violations"][name]]
        else:
            lines.append("  violations: none")
        return "\n".join(lines)
