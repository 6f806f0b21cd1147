"""rtd's executor against onnxruntime on the model zoo, side by side in one run.

For each model: compile with rtd, check its outputs against onnxruntime's literal graph, then
time rtd and onnxruntime (ORT_ENABLE_ALL, sequential) at 1 and 2 threads, each side in a fresh
process of its own (two thread pools that busy-wait in one process fight over the cores and
distort both sides), the two processes taking turns (ROUNDS each) so that load from elsewhere
on the machine falls on both sides alike; report per-model median latency, the ratio rtd/ORT and the geometric mean.
The same process gives cold start (rtd compile vs ORT session creation, plus the first run)
and peak RSS (VmHWM). Thread limits: ORT's intra_op_num_threads; for rtd, BLAS and OpenMP
pools via threadpoolctl.

    .venv/bin/python bench/executor.py                      # all models, ≥30 runs each
    .venv/bin/python bench/executor.py --quick              # small models, 5 runs: a smoke test
    .venv/bin/python bench/executor.py --models mlp,resnet18 --threads 2
"""
import os
import sys

# The machine may set these for its other users; they pick a slower OpenBLAS path for NumPy.
# They must go before NumPy loads OpenBLAS (and subprocesses inherit the cleaned environment).
UNSET_ENV = [name for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if os.environ.pop(name, None) is not None]

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import onnxruntime  # noqa: E402
import threadpoolctl  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from rtd.errors import RtdError  # noqa: E402
from rtd.kernels import compile_model, native  # noqa: E402
from tests.zoo.compare import mismatches, reference_session, run_reference  # noqa: E402

BIG_DIMS = {  # the benchmark sizes where the nominal one is not enough
    "bert_base": ({"batch": 1, "seq": 128}, {"batch": 8, "seq": 128}),
    "minilm": ({"batch": 1, "seq": 128}, {"batch": 8, "seq": 128}),
    "lightgbm_trees": ({"batch": 1}, {"batch": 500}),   # one request, and a batch where the walk dominates
    "xgboost_trees": ({"batch": 1}, {"batch": 500}),
}
QUICK_SKIP = {"bert_base", "resnet50", "minilm_dynamo", "resnet18_dynamo", "mlp_dynamo"}


# ---- one fresh process per side: cold start, latency samples, peak RSS ----

def _vm_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


ROUNDS = 6   # turns each side takes, alternating, so load that comes and goes on the machine falls on both alike


def probe(side: str, path: str, feeds_file: str, threads: int) -> None:
    """In a fresh process: build the model and run it once (cold start, printed as JSON), then serve timing
    requests from stdin: `time RUNS SECONDS` times at least RUNS warm runs over at least SECONDS (after one
    untimed run: the other side just had the cores) and prints the samples; `end` prints the peak RSS.

    Both libraries are already imported (the baseline RSS counts both alike); the peak is the whole process's.
    """
    feeds = dict(np.load(feeds_file, allow_pickle=False))
    native.set_threads(threads)   # as a worker sets them at LOAD: the compiled kernels' threads, BLAS single-threaded
    with threadpoolctl.threadpool_limits(1 if side == "rtd" else threads):
        base = _vm_kib("VmRSS")
        start = time.perf_counter()
        if side == "rtd":
            model = compile_model(path)
            run = lambda: model.run(feeds)  # noqa: E731
        else:
            session = reference_session(path, threads, optimized=True)
            run = lambda: session.run(None, feeds)  # noqa: E731
        build = time.perf_counter() - start
        run()
        first = time.perf_counter() - start - build
        print(json.dumps({"build_s": build, "first_run_s": first, "base_mib": base / 1024}), flush=True)
        for line in sys.stdin:
            words = line.split()
            if not words or words[0] != "time":
                break
            runs, min_seconds = int(words[1]), float(words[2])
            run()
            samples, started = [], time.perf_counter()
            while len(samples) < runs or time.perf_counter() - started < min_seconds:
                t = time.perf_counter()
                run()
                samples.append(time.perf_counter() - t)
            print(json.dumps(samples), flush=True)
    print(json.dumps({"peak_mib": _vm_kib("VmHWM") / 1024}), flush=True)


class ProbeFailed(Exception):
    """A probe process died or answered nothing (its last line of stderr says why)."""


class Probe:
    """One side's probe process, taking timing turns on request."""

    def __init__(self, side: str, path: str, feeds_file: str, threads: int):
        self.proc = subprocess.Popen([sys.executable, __file__, "--probe", side, path, feeds_file, str(threads)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.cold = self._reply()

    def _reply(self):
        line = self.proc.stdout.readline()
        if not line:
            self.proc.kill()
            error = self.proc.stderr.read().strip().splitlines() or [f"exit {self.proc.wait()}"]
            raise ProbeFailed(error[-1][:120])
        return json.loads(line)

    def time(self, runs: int, min_seconds: float) -> list[float]:
        self.proc.stdin.write(f"time {runs} {min_seconds}\n")
        self.proc.stdin.flush()
        return self._reply()

    def cpu_ns(self) -> int:
        """The CPU time this probe's threads have had (/proc's schedstat, in nanoseconds)."""
        total = 0
        try:
            tasks = os.listdir(f"/proc/{self.proc.pid}/task")
        except FileNotFoundError:   # the probe has ended: its failure surfaces at its next reply
            return 0
        for task in tasks:
            try:
                with open(f"/proc/{self.proc.pid}/task/{task}/schedstat") as f:
                    total += int(f.read().split()[0])
            except (FileNotFoundError, ProcessLookupError):
                pass   # a thread that ended
        return total

    def wait_idle(self, quiet_s: float = 0.005, most_s: float = 2.0) -> None:
        """Until this probe's threads have stayed off the CPU for `quiet_s` (at most `most_s`): a side's pool
        threads spin on after its turn (onnxruntime's for ~50 ms after a run), and timing the other side
        meanwhile shares its cores with them (a turn of a few tens of ms then ran at one thread's speed)."""
        end, last = time.perf_counter() + most_s, self.cpu_ns()
        while time.perf_counter() < end:
            time.sleep(quiet_s)
            now = self.cpu_ns()
            if now - last < quiet_s * 1e9 / 20:
                return
            last = now

    def close(self) -> dict:
        """The cold-start numbers and the peak RSS; the process ends."""
        self.proc.stdin.write("end\n")
        self.proc.stdin.flush()
        peak = self._reply()
        self.proc.wait(timeout=60)
        return self.cold | peak

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def spread(samples: list[float]) -> float:
    """The interquartile range over the median."""
    q1, median, q3 = statistics.quantiles(samples, n=4)
    return (q3 - q1) / median


def noisy(samples: list[float]) -> bool:
    """Interquartile range over 20 % of the median: the machine was busy; flag the number."""
    return spread(samples) > 0.2


def take_turns(probes: dict, runs: int, min_seconds: float) -> dict:
    """Each side's samples over ROUNDS turns, alternating which goes first, each turn after the other side is idle."""
    samples = {side: [] for side in probes}
    for turn in range(ROUNDS):
        for side in (("rtd", "ort") if turn % 2 == 0 else ("ort", "rtd")):
            for other in probes.values():
                if other is not probes[side]:
                    other.wait_idle()
            samples[side] += probes[side].time(math.ceil(runs / ROUNDS), min_seconds / ROUNDS)
    return samples


def time_sides(name: str, label: str, path: str, feeds: dict, thread_counts: list[int], runs: int,
               min_seconds: float) -> list[dict]:
    """One row per thread count: each side in a fresh process of its own, the two taking turns (ROUNDS each,
    alternating which goes first), so both meet the same load (outputs already checked by the caller). Where either
    side's samples are noisy (the host's slow minutes move a two-thread row by up to 1.5x), both sides take their
    turns again, once, and the set whose noisier side spreads less is kept: chosen by spread, never by ratio."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        feeds_file = os.path.join(tmp, "feeds.npz")
        np.savez(feeds_file, **feeds)
        for threads in thread_counts:
            probes = {}
            try:
                for side in ("rtd", "ort"):
                    probes[side] = Probe(side, path, feeds_file, threads)
                samples = take_turns(probes, runs, min_seconds)
                if any(noisy(v) for v in samples.values()):
                    again = take_turns(probes, runs, min_seconds)
                    if max(map(spread, again.values())) < max(map(spread, samples.values())):
                        samples = again
                cold = {side: probe.close() for side, probe in probes.items()}
            except ProbeFailed as e:  # e.g. a plan that breaks on a later run: report, go on with the next model
                rows.append({"model": name, "dims": label, "error": f"crashed while timing: {e}"[:160]})
                break
            finally:
                for probe in probes.values():
                    probe.kill()
            rtd_t, ort_t = samples["rtd"], samples["ort"]
            rtd_s, ort_s = statistics.median(rtd_t), statistics.median(ort_t)
            rows.append({"model": name, "dims": label, "threads": threads, "rtd_ms": rtd_s * 1e3, "ort_ms": ort_s * 1e3,
                         "ratio": rtd_s / ort_s, "noisy": "*" * (noisy(rtd_t) + noisy(ort_t)), "cold": cold})
    return rows


def bench_model(name: str, zoo, thread_counts: list[int], runs: int, min_seconds: float, seed: int) -> list[dict]:
    path = zoo.path()
    rows = []
    try:
        model = compile_model(path)
    except RtdError as e:
        return [{"model": name, "dims": "", "error": f"compile refused: {e}"[:160]}]
    literal = reference_session(path, 2, optimized=False)
    rng = np.random.default_rng(seed)
    for dims in BIG_DIMS.get(name, zoo.dims[:1]):
        feeds = zoo.feeds(rng, dims)
        label = ",".join(f"{k}={v}" for k, v in dims.items())
        try:
            problems = mismatches(model.run(feeds), run_reference(literal, feeds), zoo.tolerance)
        except Exception as e:  # a crash in the executor is a result to report, not a reason to stop
            problems = [f"{type(e).__name__}: {e}"]
        if problems:
            rows.append({"model": name, "dims": label, "error": ("wrong: " + "; ".join(problems))[:160]})
            continue
        rows += time_sides(name, label, path, feeds, thread_counts, runs, min_seconds)
    return rows


def report(rows: list[dict], thread_counts: list[int]) -> str:
    lines = ["| model | dims | threads | rtd ms | ORT ms | rtd/ORT |", "|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['dims']} | – | – | – | {r['error']} |")
        else:
            lines.append(f"| {r['model']} | {r['dims']} | {r['threads']} | {r['rtd_ms']:.2f} | {r['ort_ms']:.2f} "
                         f"| {r['ratio']:.2f}×{r['noisy']} |")
    lines.append("")
    for threads in thread_counts:
        ratios = [r["ratio"] for r in rows if r.get("threads") == threads]
        if ratios:
            geomean = statistics.geometric_mean(ratios)
            lines.append(f"geometric mean rtd/ORT at {threads} thread(s): {geomean:.2f}× over {len(ratios)} "
                         f"configurations (worst {max(ratios):.2f}×)")
    lines.append("(* / **: one / both sides' interquartile range exceeded 20 % of the median)")
    failed = [r for r in rows if "error" in r]
    lines.append(f"not timed (refused or wrong): {len(failed)}")
    lines += ["", "| model | dims | rtd compile s | ORT session s | rtd 1st run s | ORT 1st run s "
              "| rtd peak RSS MiB | ORT peak RSS MiB | RSS after imports MiB |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "cold" not in r or r["threads"] != max(thread_counts):
            continue
        a, b = r["cold"]["rtd"], r["cold"]["ort"]
        if "error" in a or "error" in b:
            lines.append(f"| {r['model']} | {r['dims']} | {a.get('error', '')} {b.get('error', '')} |||||||")
            continue
        lines.append(f"| {r['model']} | {r['dims']} | {a['build_s']:.2f} | {b['build_s']:.2f} | {a['first_run_s']:.3f} "
                     f"| {b['first_run_s']:.3f} | {a['peak_mib']:.0f} | {b['peak_mib']:.0f} "
                     f"| {a['base_mib']:.0f} |")
    return "\n".join(lines)


def add_timing_arguments(parser: argparse.ArgumentParser) -> None:
    """--threads, --runs, --min-seconds: shared with the benchmarks that time through `time_sides`."""
    parser.add_argument("--threads", default="1,2", help="thread counts (default 1,2)")
    parser.add_argument("--runs", type=int, default=30, help="timed runs per side (default 30)")
    parser.add_argument("--min-seconds", type=float, default=2.0, help="and at least this long per side")


def environment_line(runs: int, seed: int) -> str:
    """The versions, BLAS, CPUs and seed a result depends on, as the first line of the output."""
    blas = [f"{p['internal_api']} {p.get('version')} {p.get('architecture', '')}" for p in threadpoolctl.threadpool_info()
            if p["user_api"] == "blas"]
    return (f"# rtd executor vs onnxruntime {onnxruntime.__version__}; numpy {np.__version__}; BLAS {blas}; "
            f"unset {UNSET_ENV or 'nothing'}; {os.cpu_count()} CPUs; {runs} runs; input seed {seed}")


def start_run(parser: argparse.ArgumentParser, args, known, quick: list[str],
              everyday: list[str] | None = None) -> tuple[list[str], int, float, list[int], int]:
    """From the parsed options: the models (--models, else `quick` with --quick, else `everyday`, by default all
    `known`), runs, min seconds, thread counts and a fresh input seed; prints the environment line."""
    names = args.models.split(",") if args.models else list(quick if args.quick else everyday or known)
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"unknown models {unknown}; known: {sorted(known)}")
    runs, min_seconds = (5, 0.0) if args.quick else (args.runs, args.min_seconds)
    seed = int(np.random.SeedSequence().entropy)
    print(environment_line(runs, seed), flush=True)
    return names, runs, min_seconds, [int(t) for t in args.threads.split(",")], seed


def print_progress(name: str, rows: list[dict], started: float) -> None:
    progress = "; ".join(f"{r['dims']} {r['threads']}t {r['ratio']:.2f}×" if "ratio" in r else r["error"] for r in rows)
    print(f"# {name} ({time.perf_counter() - started:.0f} s): {progress}", file=sys.stderr, flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated zoo names (default: all)")
    parser.add_argument("--quick", action="store_true", help="small models only, 5 runs: a smoke test, not a result")
    add_timing_arguments(parser)
    parser.add_argument("--probe", nargs=4, metavar=("SIDE", "MODEL", "FEEDS", "THREADS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe:
        side, path, feeds_file, threads = args.probe
        probe(side, path, feeds_file, int(threads))
        return 0

    from tests.zoo.models import ZOO  # here, not at the top: it imports torch, which the probes must not carry

    everyday = [n for n in ZOO if not ZOO[n].huge]   # a huge model's build takes minutes: asked for by name
    names, runs, min_seconds, thread_counts, seed = start_run(parser, args, ZOO, [n for n in everyday if n not in QUICK_SKIP],
                                                              everyday)
    rows = []
    for name in names:
        started = time.perf_counter()
        done = bench_model(name, ZOO[name], thread_counts, runs, min_seconds, seed)
        rows += done
        print_progress(name, done, started)
    print(report(rows, thread_counts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
