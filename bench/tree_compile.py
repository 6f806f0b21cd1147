"""Compile time and peak memory of big models (the tree ensembles), rtd against onnxruntime's session.

Each side runs in a fresh process per round, the sides in turns: the imports come before the clock,
then `compile_model(path)` or an `InferenceSession` with one intra-op thread, then one row is run. The
process's peak RSS (ru_maxrss) and the RSS after the imports are printed beside the times.

    .venv/bin/python bench/tree_compile.py --rounds 2 PATH [PATH ...]
    .venv/bin/python bench/tree_compile.py ~/.cache/rtd/zoo/lightgbm_large-*.onnx
"""
import argparse
import json
import os
import subprocess
import sys

PROBE = """
import json, resource, sys, time
import numpy as np
side, path = sys.argv[1], sys.argv[2]
if side == "rtd":
    from rtd.kernels import compile_model
else:
    import onnxruntime as ort
after_imports = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
wall, cpu = time.perf_counter(), time.process_time()
if side == "rtd":
    model = compile_model(path)
    spec = model.inputs[0]
    name, columns, run = spec.name, spec.shape[1], lambda feeds: model.run(feeds)
else:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    first = session.get_inputs()[0]
    name, columns, run = first.name, first.shape[1], lambda feeds: session.run(None, feeds)
compiled_wall, compiled_cpu = time.perf_counter() - wall, time.process_time() - cpu
start = time.perf_counter()
run({name: np.random.default_rng(0).standard_normal((1, columns), dtype=np.float32)})
print(json.dumps({"compile_s": compiled_wall, "compile_cpu_s": compiled_cpu, "first_run_s": time.perf_counter() - start,
                  "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "after_imports_mib": after_imports}))
"""


def probe(side: str, path: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, side, path], capture_output=True, text=True, timeout=3600,
                          env=dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1"))
    if done.returncode:
        raise SystemExit(f"{side} {path}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print("| model | side | compile s (CPU s) per round | first run s | peak RSS MiB | RSS after imports MiB |")
    print("|---|---|---|---|---|---|")
    for path in args.paths:
        results = {"rtd": [], "ort": []}
        for _ in range(args.rounds):
            for side in results:
                results[side].append(probe(side, path))
        for side, rounds in results.items():
            times = ", ".join(f"{r['compile_s']:.2f} ({r['compile_cpu_s']:.2f})" for r in rounds)
            print(f"| {os.path.basename(path)} | {side} | {times} | {min(r['first_run_s'] for r in rounds):.3f} | "
                  f"{max(r['peak_mib'] for r in rounds):.0f} | {rounds[0]['after_imports_mib']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
