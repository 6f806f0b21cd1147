"""Issue 17's table, measured: a hostile tenant (acme) sends its own models payload-sized
requests (tests/daemon/payloads.py, from processes of their own) while beta calls its own small
model; beta's latency alone and during each attack, side by side in one run, and the
supervisor's resident memory during and after. Goal per row: beta's p99 under attack
<= max(3x its p99 alone, 50 ms) and supervisor RSS <= +64 MB during and after.

    sudo .venv/bin/python bench/attacks.py [--seconds 10] [--kinds bytes_16m,flood,...]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.daemon.conftest import Daemon, mlp  # noqa: E402
from tests.daemon.payloads import KINDS, strings_model  # noqa: E402

X = np.array([[1, 2, 3, 4], [0.5, -1, 2, 0]], np.float32)
RSS_GOAL = 64 << 20


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) << 10 for line in f if line.startswith("VmRSS:"))


def probe(d: Daemon, seconds: float) -> list:
    """Beta's latencies (s) of sequential calls for `seconds`."""
    client, out = d.client("beta"), []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        start = time.perf_counter()
        client.infer("mlp", {"X": X}, timeout=60)
        out.append(time.perf_counter() - start)
    return out


def watch(pid: int, peak: list, stop: threading.Event) -> None:
    while not stop.is_set():
        peak[0] = max(peak[0], rss(pid))
        time.sleep(0.05)


def quantiles(samples: list) -> tuple[float, float]:
    s = sorted(samples)
    return s[len(s) // 2] * 1e3, s[min(len(s) - 1, int(len(s) * 0.99))] * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--kinds", default=",".join(KINDS))
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="rtd-attacks-")
    d = Daemon(root, max_concurrency=2, memory_bytes=1 << 30, limits={"max_request_elements": 4_000_000}).start()
    try:
        d.client("acme").load("strings", d.package("acme", strings_model(), "strings"))
        d.client("acme").load("mlp", d.package("acme", mlp(1), "mlp"))
        d.client("beta").load("mlp", d.package("beta", mlp(2), "mlp"))
        probe(d, 1.0)   # warm
        alone = quantiles(probe(d, args.seconds))
        print(f"rtd attacks: beta alone p50 {alone[0]:.2f} ms p99 {alone[1]:.2f} ms; supervisor RSS {rss(d.proc.pid) >> 20} MiB")
        print("| acme sends | beta p50 alone → during (ms) | beta p99 alone → during (ms) | goal p99 | supervisor RSS "
              "before → peak → after (MiB) | acme's calls |")
        print("|---|---|---|---|---|---|")
        for kind in args.kinds.split(","):
            base = quantiles(probe(d, args.seconds / 2))
            before, peak, stop = rss(d.proc.pid), [0], threading.Event()
            watcher = threading.Thread(target=watch, args=(d.proc.pid, peak, stop))
            watcher.start()
            attacker = subprocess.Popen([sys.executable, "-m", "tests.daemon.payloads", kind, d.socket,
                                         os.path.join(d.state, "rtd-rest.sock"), d.tokens["acme"], str(args.seconds),
                                         "20" if kind == "flood" else "2"],
                                        stdout=subprocess.PIPE, text=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            time.sleep(2.0)   # the attacker builds its bodies first
            during = quantiles(probe(d, args.seconds - 2.5))
            out, _ = attacker.communicate()
            stop.set()
            watcher.join()
            time.sleep(1.0)
            after = rss(d.proc.pid)
            goal = max(3 * base[1], 50.0)
            ok = "ok" if during[1] <= goal and peak[0] - before <= RSS_GOAL and after - before <= RSS_GOAL else "MISSED"
            print(f"| {kind} | {base[0]:.2f} → {during[0]:.2f} | {base[1]:.2f} → {during[1]:.2f} | ≤ {goal:.0f} ({ok}) | "
                  f"{before >> 20} → {peak[0] >> 20} → {after >> 20} | {out.strip()} |", flush=True)
    finally:
        d.stop()


if __name__ == "__main__":
    main()
