"""rtd against onnxruntime at one thread by the calling thread's CPU clock, in one process, runs taken in turn.

At one thread both run on the calling thread (onnxruntime makes no pool; rtd's kernels use the caller), so
the thread's CPU clock counts each side's own work whatever else the machine runs: a load-robust
complement to bench/executor.py's and bench/real_models.py's wall-clock medians, which on a shared
2-core machine swing by 2-5x when other work comes and goes. It cannot measure two threads (a pool's
threads are not the caller's) or cold start; those come from the wall-clock scripts. Outputs are not
checked here (the wall-clock scripts check them first).

    .venv/bin/python bench/cpu_clock.py --runs 20                    # every real model and the zoo's models
    .venv/bin/python bench/cpu_clock.py --models magika,resnet18 --runs 50
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.executor import BIG_DIMS  # noqa: E402  (first: it cleans the OpenBLAS environment before NumPy loads)

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import threadpoolctl  # noqa: E402

from bench.real_models import DEFAULT_CACHE, MODELS, model_path  # noqa: E402
from rtd.errors import RtdError  # noqa: E402
from rtd.kernels import compile_model, native  # noqa: E402
from tests.zoo.compare import reference_session  # noqa: E402

ZOO_MODELS = ["mlp", "resnet18", "resnet50", "minilm", "lstm_tagger", "gru_tagger", "control_flow", "detector",
              "small_cnn", "branchy_cnn", "cnn_qdq", "cnn_qop"]


def model_and_feeds(name: str, rng):
    if name in MODELS:
        return model_path(MODELS[name], DEFAULT_CACHE), MODELS[name].feeds(rng)
    from tests.zoo.models import ZOO   # imports torch: only when a zoo model is asked for
    zoo = ZOO[name]
    return zoo.path(), zoo.feeds(rng, BIG_DIMS.get(name, zoo.dims[:1])[0])


def cpu_times(path: str, feeds: dict, runs: int) -> tuple[list[float], list[float]]:
    model, session = compile_model(path), reference_session(path, 1, optimized=True)
    sides = [lambda: model.run(feeds), lambda: session.run(None, feeds)]
    for side in sides:
        side()
        side()
    samples = ([], [])
    for _ in range(runs):
        for side, times in zip(sides, samples):
            start = time.thread_time()
            side()
            times.append(time.thread_time() - start)
    return samples


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated real-model or zoo names (default: every real model and "
                                         f"{','.join(ZOO_MODELS)})")
    parser.add_argument("--runs", type=int, default=20, help="runs per side (default 20)")
    args = parser.parse_args(argv)
    names = args.models.split(",") if args.models else list(MODELS) + ZOO_MODELS
    native.set_threads(1)
    print("| model | rtd ms (CPU) | onnxruntime ms (CPU) | rtd/ORT median | rtd/ORT best |\n|---|---|---|---|---|")
    ratios = []
    with threadpoolctl.threadpool_limits(1):
        for name in names:
            path, feeds = model_and_feeds(name, np.random.default_rng(0))
            try:
                ours, theirs = cpu_times(path, feeds, args.runs)
            except RtdError as e:
                print(f"| {name} | refused: {e} | | | |")
                continue
            ratio = statistics.median(ours) / statistics.median(theirs)
            ratios.append(ratio)
            print(f"| {name} | {statistics.median(ours) * 1e3:.2f} | {statistics.median(theirs) * 1e3:.2f} | {ratio:.2f}× "
                  f"| {min(ours) / min(theirs):.2f}× |", flush=True)
    if ratios:
        print(f"\ngeometric mean rtd/ORT (CPU clock, 1 thread): {statistics.geometric_mean(ratios):.2f}× "
              f"over {len(ratios)} models (worst {max(ratios):.2f}×)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
