"""Chaos soak of `rtd serve`: a calm tenant and hostile tenants at once, with the supervisor,
its workers, its connections and its state disk attacked at random moments, and the
invariants of tests/soak/invariants.py checked all along and at the end. As root, from the
repository root:

    .venv/bin/python -m tests.soak.chaos --seconds 120 [--seed N]     # what CI runs (test_chaos.py)
    .venv/bin/python -m tests.soak.chaos --requests 51840000          # the long version (scripts/soak.sh)

Prints a summary (requests per kind, refusals by code, chaos events, invariant checks run,
peaks, violations) and exits 1 if any invariant was violated; the soak's directory (the
daemon's logs) is then kept and named."""
import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")   # before grpc is imported: see tests/conftest.py

import argparse
import dataclasses
import json
import random
import sys
import time
import traceback

from tests.daemon.conftest import NEEDS_ROOT
from tests.soak import invariants
from tests.soak.calm import MAIN, CalmInfer, CalmLifecycle, infer
from tests.soak.disruptions import Conductor, DiskFiller, HostileWorkerKiller, CalmWorkerKiller, IdleFlood
from tests.soak.harness import CALM, LIMITS, STATE_TMPFS_BYTES, Soak
from tests.soak.hostile import DeadlineStorm, HostileChurn, HostileInfer, RawAttack, key_for

JOIN_S = 120.0   # an actor still busy this long after the end is stuck


@dataclasses.dataclass
class Options:
    seconds: float = 0.0          # run this long, or
    requests: int = 0             # until calm + hostile requests reach this
    seed: int = 0
    hostile: int = 1              # hostile tenants
    calm_threads: int = 1
    calm_rate: float = 0.0        # requests/s per calm thread; 0: as fast as answers come
    kill_every: float = 30.0      # mean seconds between supervisor kill -9s
    project_after: float = 60.0   # --requests: print the projected duration after this long
    progress: float = 60.0        # seconds between progress lines
    keep: bool = False
    json: str = ""
    skip: tuple = ()              # chaos elements left out (Actor.element, HostileChurn.OPS names)


@dataclasses.dataclass
class Result:
    ok: bool
    text: str
    data: dict


def _begin(soak: Soak) -> invariants.Bounds:
    """First start, the first loads of every tenant, a few checked answers, the baseline."""
    soak.start()
    first = [(CALM, MAIN)] + [(t, n) for t in soak.hostile for n in ("bomb", "slow", "m0", "m1")]
    for tenant, name in first:
        counter = soak.book.next_counter(tenant, name)
        key = "bomb" if name == "bomb" else key_for(tenant, name, counter)
        files = soak.package(tenant, name, key, counter)
        soak.book.remember(tenant, name, key, files)
        soak.book.begin(tenant, name, key)
        soak.client(tenant).load(name, files)
        soak.book.acked(tenant, name, key)
    soak.gate.open()
    for i in range(len(soak.catalog.inputs)):
        infer(soak, MAIN, i)
    pid = soak.daemon.proc.pid
    return invariants.Bounds(invariants.rss(pid), invariants.fds(pid), len(soak.tenants))


def _actors(soak: Soak, bounds: invariants.Bounds) -> list:
    conductor = Conductor(soak, "conductor")
    actors = [CalmInfer(soak, f"calm-infer-{i}") for i in range(soak.options.calm_threads)]
    actors += [CalmLifecycle(soak, "calm-lifecycle"), CalmWorkerKiller(soak, "calm-worker-kill"),
               IdleFlood(soak, "idle-flood"), conductor, invariants.Monitor(soak, "monitor", bounds, conductor)]
    if soak.disk.mounted:
        actors.append(DiskFiller(soak, "disk-filler"))
    for t in soak.hostile:
        actors += [HostileInfer(soak, f"{t}-infer", t), DeadlineStorm(soak, f"{t}-storm", t), RawAttack(soak, f"{t}-raw", t),
                   HostileChurn(soak, f"{t}-churn", t), HostileWorkerKiller(soak, f"{t}-worker-kill", t)]
    return [a for a in actors if a.element not in soak.options.skip]


def _wait(soak: Soak, options: Options) -> None:
    started, projected, next_progress = time.monotonic(), False, options.progress
    while not soak.fatal:
        time.sleep(1.0)
        elapsed, total = time.monotonic() - started, soak.tally.total_requests()
        if (options.seconds and elapsed >= options.seconds) or (options.requests and total >= options.requests):
            return
        if options.requests and not projected and elapsed >= options.project_after:
            projected, rate = True, total / elapsed
            print(f"soak: {rate:.0f} requests/s over the first {elapsed:.0f} s: {options.requests} requests "
                  f"will take about {options.requests / rate / 3600:.1f} h", flush=True)
        if options.progress and elapsed >= next_progress:
            next_progress += options.progress
            t = soak.tally
            print(f"soak: {elapsed:7.0f} s  {total} requests ({total / elapsed:.0f}/s)  restarts {t.events['restart']}  "
                  f"rss {t.peaks.get('rss_mib', 0):g} MiB  fds {t.peaks.get('fds', 0):g}  "
                  f"violations {sum(t.violations.values())}", flush=True)
    soak.tally.violation("soak cut short", soak.fatal)


def _finish(soak: Soak, actors: list) -> None:
    """Stop the chaos; check the idle daemon, stop it, check nothing is left; once more
    after a clean restart."""
    soak.stop.set()
    for actor in actors:
        actor.join(JOIN_S)
        if actor.is_alive():
            soak.tally.violation("actor stuck", f"{actor.name} still running {JOIN_S:g} s after the end")
        actor.close()
    if soak.fatal:
        return
    with soak.restart_lock:
        soak.gate.close()
        soak.disk.empty()
        invariants.quiescent(soak)
        for last in (False, True):
            code = soak.daemon.stop()
            soak.tally.check("clean stop", code == 0, f"rtd serve exited {code} on SIGTERM")
            invariants.gone(soak, "nothing left after stop", timeout=15.0, cgroups=True)
            if last:
                break
            soak.start()
            invariants.after_restart(soak)
        soak.scan_log()


def run(options: Options) -> Result:
    soak = Soak(options)
    if not soak.disk.mounted:
        soak.tally.note(f"full-disk chaos skipped: cannot mount a tmpfs on the state directory ({soak.disk.why_not})")
    bounds = None
    try:
        bounds = _begin(soak)
        actors = _actors(soak, bounds)
        for actor in actors:
            actor.start()
        _wait(soak, options)
        _finish(soak, actors)
    except Exception:
        soak.tally.violation("soak failed", traceback.format_exc(limit=10))
    finally:
        soak.stop.set()
        if soak.daemon.proc is not None and soak.daemon.proc.poll() is None:
            soak.daemon.stop()
    header = {
        "seed": options.seed, "tenants": ", ".join(soak.tenants), "instance": soak.instance,
        "options": ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(options).items() if k not in ("json", "keep")),
        "state disk": f"plain directory ({soak.disk.why_not})" if soak.disk.why_not else f"tmpfs {STATE_TMPFS_BYTES >> 20} MiB",
        "limits": ", ".join(f"{k}={v}" for k, v in LIMITS.items()),
        "bounds": bounds.describe() if bounds else "not measured",
    }
    ok = not soak.tally.violations
    soak.close(keep=options.keep or not ok)
    data = dict(soak.tally.as_dict(), header=header, ok=ok)
    if options.json:
        with open(options.json, "w") as f:
            json.dump(data, f, indent=1, default=str)
    return Result(ok, soak.tally.summary(header), data)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.soak.chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=0.0, help="run this long (default 120 when --requests is not given)")
    parser.add_argument("--requests", type=int, default=0, help="run until calm + hostile requests reach this")
    parser.add_argument("--seed", type=int, default=None, help="seed of every random choice (default: a random one, printed)")
    parser.add_argument("--hostile", type=int, default=1, help="hostile tenants (default 1)")
    parser.add_argument("--calm-threads", type=int, default=1)
    parser.add_argument("--calm-rate", type=float, default=0.0, help="requests/s per calm thread (0: unpaced)")
    parser.add_argument("--kill-every", type=float, default=30.0, help="mean seconds between supervisor kill -9s")
    parser.add_argument("--project-after", type=float, default=60.0)
    parser.add_argument("--progress", type=float, default=60.0, help="seconds between progress lines (0: none)")
    parser.add_argument("--keep", action="store_true", help="keep the soak's directory even when nothing failed")
    parser.add_argument("--json", default="", help="also write the summary as JSON here")
    parser.add_argument("--skip", default="", help="comma-separated chaos elements to leave out, to tell which one "
                        "a violation needs: calm-churn, calm-worker-kill, hostile-infer, hostile-churn, hostile-worker-kill, "
                        "deadline-storm, raw-h2, idle-flood, disk-full, supervisor-kill, or a churn op (unload_busy, "
                        "unload_deadline, load_deadline, reload, replay, big)")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print(f"soak: {NEEDS_ROOT}", file=sys.stderr)
        return 2
    options = Options(seconds=args.seconds or (0.0 if args.requests else 120.0), requests=args.requests,
                      seed=random.randrange(1 << 31) if args.seed is None else args.seed, hostile=args.hostile,
                      calm_threads=args.calm_threads, calm_rate=args.calm_rate, kill_every=args.kill_every,
                      project_after=args.project_after, progress=args.progress, keep=args.keep, json=args.json,
                      skip=tuple(filter(None, args.skip.split(","))))
    print(f"soak: seed {options.seed}", flush=True)
    result = run(options)
    print(result.text, flush=True)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
