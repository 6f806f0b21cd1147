#!/usr/bin/env bash
# GPU check for rtd's executor, for an NVIDIA host that has CuPy, torch (CUDA) and onnxruntime.
#   bench/gpu_check.sh [OUT.md]          (about 10 minutes on an H200; writes a markdown table)
# For each zoo model at batch 8: rtd on device="cuda" against rtd's CPU plan (correctness,
# scaled error), then latency of rtd-cuda, PyTorch eager and torch.compile on the same net
# and weights (median of 30 after warm-up, host→device→host copies included for rtd and torch).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${1:-bench/gpu-results.md}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || { echo "no NVIDIA GPU: nothing to check"; exit 2; }
exec timeout 900 "$PY" - "$OUT" <<'PYEOF'
import statistics, sys, time, traceback
import numpy as np, torch
sys.path.insert(0, ".")
from rtd.kernels import compile_model
from tests.zoo import nets
from tests.zoo.compare import mismatches
from tests.zoo.models import ZOO

NETS = {  # the builders' nets and seeds (tests/zoo/models.py), so torch runs the same weights
    "mlp": (lambda: nets.perturbed_init(nets.MLP(), seed=1024), {"batch": 8}),
    "small_cnn": (lambda: nets.perturbed_init(nets.SmallCNN(), seed=32), {"batch": 8}),
    "resnet18": (lambda: nets.perturbed_init(nets.ResNet(nets.BasicBlock, [2, 2, 2, 2]), seed=18), {"batch": 8}),
    "minilm": (lambda: nets.perturbed_init(nets.Encoder(layers=6, hidden=384, heads=12), seed=384), {"batch": 8, "seq": 128}),
    "bert_base": (lambda: nets.perturbed_init(nets.Encoder(layers=12, hidden=768, heads=12), seed=768), {"batch": 8, "seq": 128}),
}


def median_ms(fn, runs=30):
    for _ in range(5):
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


rows = []
for name, (make_net, dims) in NETS.items():
    try:
        zoo = ZOO[name]
        feeds = zoo.feeds(np.random.default_rng(0), dims)
        cpu, gpu = compile_model(zoo.path()), compile_model(zoo.path(), device="cuda")
        want, got = cpu.run(feeds), gpu.run(feeds)
        bad = mismatches(got, want, zoo.tolerance)
        rtd_ms = median_ms(lambda: gpu.run(feeds))
        net = make_net().eval().cuda()

        def torch_call(model):
            def call():  # inputs up, outputs down: the same copies rtd's run makes
                with torch.inference_mode():
                    out = model(*[torch.from_numpy(v).cuda() for v in feeds.values()])
                    [t.cpu() for t in (out if isinstance(out, tuple) else (out,))]
            return call
        eager_ms = median_ms(torch_call(net))
        compiled_ms = median_ms(torch_call(torch.compile(net)))
        rows.append((name, dims, "ok" if not bad else "MISMATCH " + bad[0][:60], rtd_ms, eager_ms, compiled_ms))
    except Exception as e:  # one model's failure is a row, not the end of the check
        traceback.print_exc()
        rows.append((name, dims, f"error: {type(e).__name__}: {str(e)[:80]}", float("nan"), float("nan"), float("nan")))
    print(rows[-1], flush=True)

lines = [f"GPU: {torch.cuda.get_device_name(0)}; rtd-cuda vs rtd-cpu correctness, latency median of 30 (ms)", "",
         "| model | dims | rtd cuda vs cpu | rtd cuda | torch eager | torch.compile | eager / rtd |", "|---|---|---|---|---|---|---|"]
for name, dims, status, r, e, c in rows:
    lines.append(f"| {name} | {dims} | {status} | {r:.2f} | {e:.2f} | {c:.2f} | {e / r:.2f}× |")
with open(sys.argv[1], "w") as f:
    f.write("\n".join(lines) + "\n")
print("\n".join(lines))
PYEOF
