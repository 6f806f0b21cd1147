"""Start-worker → first reply of a fully confined worker, side by side with the anchor
(spawning a fresh interpreter), interleaved in one run so load on a shared machine hits
every side alike. Reports medians (and min/max) of --runs samples and ratios.

Sides:
  re-spawn    Zygote.spawn of rtd.sandbox.echo:serve with the production policy (all layers)
              when the tenant's spare is armed (a worker already confined by every layer,
              waiting for its job): what a worker restart costs. Until its first framed reply.
  first spawn the same with no spare (a zygote with spares=False): cgroup leaf, helper fork,
              migration (one RCU grace period), unshare, worker fork and every layer on the path.
  bare fork   a plain os.fork() of this process (NumPy loaded, like the zygote) answering
              over a socketpair: no cgroup, namespace or seccomp, to show what confinement costs.
  fresh       subprocess: a new interpreter that imports numpy and prints one line.

Each timed spawn starts after 100 ms without cgroup migrations (restarts do not come in
bursts). Then the migration itself: one process writing its pid into the leaf's
cgroup.procs of every hierarchy, back to back and with 50 ms before each write (is the
RCU wait per write or per burst?).

    sudo .venv/bin/python bench/sandbox.py --runs 30
"""
import argparse
import json
import logging
import os
import socket
import statistics
import subprocess
import sys
import time

import numpy  # noqa: F401  (the bare-fork side forks a process that has NumPy, like the zygote)

from rtd.sandbox import TenantIdentity, load_policy
from rtd.sandbox.cgroup import WorkerCgroup, detect_layout
from rtd import wire
from rtd.sandbox.zygote import Zygote


def time_zygote(zygote, policy, identity) -> tuple[float, dict]:
    zygote.settle()   # a restart finds the spare armed long ago; never time a spawn against the arming
    time.sleep(0.1)   # nor right after another cgroup migration: the RCU wait is paid once per burst
    ours, theirs = socket.socketpair()
    start = time.perf_counter()
    handle = zygote.spawn("rtd.sandbox.echo:serve", policy=policy, identity=identity, sock=theirs)
    theirs.close()
    reply = wire.Reader(ours).recv().head
    elapsed = time.perf_counter() - start
    assert reply == {"hello": []}, reply
    ours.close()
    assert handle.wait(10).code == 0
    return elapsed, handle.startup_ms


def time_migrations(policy, identity, gap_s: float) -> dict[str, float]:
    """ms of each cgroup.procs write of a forked process joining a fresh leaf in every hierarchy,
    after 100 ms of quiet and `gap_s` before each write."""
    cg = WorkerCgroup.create(detect_layout(), policy.cgroup_parent, f"bench{os.getpid()}", identity.name,
                             f"mig{os.getpid()}", policy.limits)
    read_fd, write_fd = os.pipe()
    time.sleep(0.1)
    pid = os.fork()
    if pid == 0:
        took = []
        for path in cg.procs_files:
            time.sleep(gap_s)
            start = time.perf_counter()
            with open(path, "w") as f:
                f.write(str(os.getpid()))
            took.append((time.perf_counter() - start) * 1000)
        os.write(write_fd, json.dumps(took).encode())
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd) as f:
        took = json.loads(f.read())
    os.waitpid(pid, 0)
    cg.remove()
    return dict(zip(cg.dirs, took))

def time_bare_fork() -> float:
    ours, theirs = socket.socketpair()
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        try:
            wire.send(theirs, wire.Kind.OK, 0, {"hello": []})
        finally:
            os._exit(0)
    theirs.close()
    reply = wire.Reader(ours).recv().head
    elapsed = time.perf_counter() - start
    assert reply == {"hello": []}
    ours.close()
    os.waitpid(pid, 0)
    return elapsed


def time_fresh_interpreter() -> float:
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", "import numpy, sys; sys.stdout.write('ok\\n')"],
                            stdout=subprocess.PIPE)
    line = proc.stdout.readline()
    elapsed = time.perf_counter() - start
    assert line == b"ok\n"
    proc.wait()
    return elapsed


def summary(samples: list[float]) -> str:
    ms = [s * 1000 for s in samples]
    return f"{statistics.median(ms):.1f} ms (min {min(ms):.1f}, max {max(ms):.1f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench/sandbox.py needs root (it starts real confined workers)", file=sys.stderr)
        return 2
    logging.getLogger("rtd.sandbox").setLevel(logging.ERROR)
    zygote = Zygote.start(preload=("rtd.sandbox.echo",))
    cold = Zygote.start(preload=("rtd.sandbox.echo",), spares=False)
    policy, identity = load_policy(), TenantIdentity("bench", 61000, 61000)
    zygote_sides = {"re-spawn (spare armed, all layers)": zygote, "first spawn (no spare, all layers)": cold}
    sides = {name: [] for name in zygote_sides} | {"bare fork (no confinement)": [], "fresh interpreter + numpy": []}
    steps = {name: {} for name in zygote_sides}
    try:
        for z in zygote_sides.values():
            time_zygote(z, policy, identity)   # warm-up: first-ever cgroup creation and fork
        for _ in range(args.runs):
            for name, z in zygote_sides.items():
                elapsed, startup = time_zygote(z, policy, identity)
                sides[name].append(elapsed)
                for step, ms in startup.items():
                    steps[name].setdefault(step, []).append(ms)
            sides["bare fork (no confinement)"].append(time_bare_fork())
            sides["fresh interpreter + numpy"].append(time_fresh_interpreter())
        migrations = {gap: [time_migrations(policy, identity, gap) for _ in range(max(5, args.runs // 3))]
                      for gap in (0.0, 0.05)}
    finally:
        zygote.close()
        cold.close()
    anchor = statistics.median(sides["fresh interpreter + numpy"])
    print(f"| side | start → first reply, median of {args.runs} | vs fresh interpreter |")
    print("|---|---|---|")
    for name, samples in sides.items():
        print(f"| {name} | {summary(samples)} | {statistics.median(samples) / anchor:.3f}× |")
    for name in zygote_sides:
        print(f"\nWhere the time goes, {name} (median ms per step, in the zygote's children):\n")
        print("| step | median ms |\n|---|---|")
        for step, samples in steps[name].items():
            print(f"| {step} | {statistics.median(samples):.2f} |")
    print("\nJoining a leaf: ms per cgroup.procs write, in hierarchy order, median over repeats\n")
    hierarchies = list(migrations[0.0][0])
    print("| pause before each write (after 100 ms quiet) | " + " | ".join(hierarchies) + " |")
    print("|---|" + "---|" * len(hierarchies))
    for gap, runs in migrations.items():
        cols = [statistics.median(r[h] for r in runs) for h in hierarchies]
        print(f"| {gap * 1000:.0f} ms | " + " | ".join(f"{c:.2f}" for c in cols) + " |")
    print(f"\nload average at the end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
