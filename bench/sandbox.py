"""Start-worker → first reply of a fully confined worker, side by side with the anchor
(spawning a fresh interpreter), interleaved in one run so load on a shared machine hits
every side alike. Reports medians (and min/max) of --runs samples and ratios.

Sides:
  zygote      Zygote.spawn of rtd.sandbox.echo:serve with the production policy (all layers),
              until its first framed reply arrives on the socket.
  bare fork   a plain os.fork() of this process (NumPy loaded, like the zygote) answering
              over a socketpair: no cgroup, namespace or seccomp, to show what confinement costs.
  fresh       subprocess: a new interpreter that imports numpy and prints one line.

    sudo .venv/bin/python bench/sandbox.py --runs 30
"""
import argparse
import logging
import os
import socket
import statistics
import subprocess
import sys
import time

import numpy  # noqa: F401  (the bare-fork side forks a process that has NumPy, like the zygote)

from rtd.sandbox import TenantIdentity, load_policy
from rtd.sandbox.confined import recv_json, send_json
from rtd.sandbox.zygote import Zygote


def time_zygote(zygote, policy, identity) -> tuple[float, dict]:
    ours, theirs = socket.socketpair()
    start = time.perf_counter()
    handle = zygote.spawn("rtd.sandbox.echo:serve", policy=policy, identity=identity, sock=theirs)
    theirs.close()
    reply = recv_json(ours)
    elapsed = time.perf_counter() - start
    assert reply == {"hello": []}, reply
    ours.close()
    assert handle.wait(10).code == 0
    return elapsed, handle.startup_ms


def time_bare_fork() -> float:
    ours, theirs = socket.socketpair()
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        try:
            send_json(theirs, {"hello": []})
        finally:
            os._exit(0)
    theirs.close()
    reply = recv_json(ours)
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
    policy, identity = load_policy(), TenantIdentity("bench", 61000, 61000)
    sides = {"zygote (all layers)": [], "bare fork (no confinement)": [], "fresh interpreter + numpy": []}
    steps: dict[str, list[float]] = {}
    try:
        time_zygote(zygote, policy, identity)   # warm-up: first-ever cgroup creation and fork
        for _ in range(args.runs):
            elapsed, startup = time_zygote(zygote, policy, identity)
            sides["zygote (all layers)"].append(elapsed)
            for step, ms in startup.items():
                steps.setdefault(step, []).append(ms)
            sides["bare fork (no confinement)"].append(time_bare_fork())
            sides["fresh interpreter + numpy"].append(time_fresh_interpreter())
    finally:
        zygote.close()
    zyg = statistics.median(sides["zygote (all layers)"])
    print(f"| side | start → first reply, median of {args.runs} | vs zygote |")
    print("|---|---|---|")
    for name, samples in sides.items():
        print(f"| {name} | {summary(samples)} | {statistics.median(samples) / zyg:.2f}× |")
    print(f"\nWhere the zygote path's time goes (median ms per step, in the zygote's children):\n")
    print("| step | median ms |\n|---|---|")
    for step, samples in steps.items():
        print(f"| {step} | {statistics.median(samples):.2f} |")
    print(f"\nload average at the end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
