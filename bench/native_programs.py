"""Whole-plan native execution against the per-step path and onnxruntime, at one thread by the calling
thread's CPU clock, in one process, the three sides' runs taken in turn.

The per-step side is the same compiled model with `kernels.emit` declining every node (each step a Python
call into its kernel, as before native programs), so the ratio native/per-step is what running a plan's
compiled steps as one C program saves; the largest difference between the two rtd sides' outputs, scaled by
the output's largest magnitude, is printed beside it.

    .venv/bin/python bench/native_programs.py --runs 7                 # every real model and the zoo's models
    .venv/bin/python bench/native_programs.py --models silero_vad_op15,small_cnn --runs 20
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.executor import BIG_DIMS  # noqa: E402,F401  (first: it cleans the OpenBLAS environment before NumPy loads)

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import threadpoolctl  # noqa: E402

import rtd.kernels.plan as plan_module  # noqa: E402
from bench.cpu_clock import ZOO_MODELS, model_and_feeds  # noqa: E402
from bench.real_models import MODELS  # noqa: E402
from rtd.errors import RtdError  # noqa: E402
from rtd.kernels import compile_model, native  # noqa: E402
from tests.zoo.compare import reference_session  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated real-model or zoo names (default: all)")
    parser.add_argument("--runs", type=int, default=7, help="runs per side (default 7)")
    args = parser.parse_args(argv)
    names = args.models.split(",") if args.models else [n for n in MODELS if n != "ddddocr_ocr_quantized"] + ZOO_MODELS
    native.set_threads(1)
    print("| model | native ms | per-step ms | ORT ms | native/per-step | native/ORT | per-step/ORT | nodes native/planned | scaled difference |\n"
          "|---|---|---|---|---|---|---|---|---|")
    gains, ratios = [], []
    with threadpoolctl.threadpool_limits(1):
        for name in names:
            path, feeds = model_and_feeds(name, np.random.default_rng(0))
            try:
                ours, plain = compile_model(path), None
                emit = plan_module.emit
                plan_module.emit = lambda *args: None
                try:   # its plans are made on its first runs, so those run with emit declining
                    plain = compile_model(path)
                    expected = [plain.run(feeds) for _ in range(2)][-1]
                finally:
                    plan_module.emit = emit
                got = [ours.run(feeds) for _ in range(2)][-1]
            except RtdError as e:
                print(f"| {name} | refused: {e} | | | | | | | |")
                continue
            difference = max(float(np.max(np.abs(got[k].astype(np.float64) - expected[k]))) / (float(np.max(np.abs(expected[k]))) or 1.0)
                             for k in expected if expected[k].size and expected[k].dtype.kind == "f")
            session = reference_session(path, 1, optimized=True)
            sides = [lambda m=ours, f=feeds: m.run(f), lambda m=plain, f=feeds: m.run(f), lambda s=session, f=feeds: s.run(None, f)]
            samples = ([], [], [])
            session.run(None, feeds)
            for _ in range(args.runs):
                for side, times in zip(sides, samples):
                    start = time.thread_time()
                    side()
                    times.append(time.thread_time() - start)
            n, p, o = (statistics.median(t) * 1e3 for t in samples)
            stats = ours.plan_stats(feeds)
            gains.append(n / p)
            ratios.append(n / o)
            print(f"| {name} | {n:.2f} | {p:.2f} | {o:.2f} | {n / p:.2f}× | {n / o:.2f}× | {p / o:.2f}× | "
                  f"{stats['native_nodes']}/{sum(stats['ops'].values())} | {difference:.2g} |", flush=True)
    if gains:
        print(f"\ngeometric means over {len(gains)} models: native/per-step {statistics.geometric_mean(gains):.2f}×, "
              f"native/ORT {statistics.geometric_mean(ratios):.2f}×")
    return 0


if __name__ == "__main__":
    sys.exit(main())
