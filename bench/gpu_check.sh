#!/usr/bin/env bash
# The GPU check (issues 11 and 20), one prepared run for an NVIDIA host with CuPy, PyTorch and (if
# present) onnxruntime-gpu, as root, offline:
#   bench/gpu_check.sh [OUT.md]        (PY=python to choose the interpreter; OUT defaults to bench/RESULTS.md)
# Appends one dated table to OUT, a row per check as it goes, so a run cut short keeps what it measured:
#   (a)  CUDA's calls after start-up (strace) sorted by the compiled GPU filter      at most  90 s
#   (b)-(d), (a') CUDA inside the real worker root under the enforcing filter, the   at most  90 s
#        device it gets (UUID vs NVML), its CUDA graph; the same under unsafe_gpu_audit
#   (e)  the NVML watcher in a pod-like pid namespace: pid matching, poll→kill         at most  45 s
#   (f), (g) raw cudaMalloc past the GPU budget in a confined worker, a request        at most  45 s
#        past it through the daemon
#   (h), (i) confined load with a GPU, per-request serving overhead                   at most  60 s
#   (j)  a subset of the `_cuda` ONNX node cases (pytest)                              at most  50 s
#   (k)  the zoo on rtd-cuda vs rtd-cpu, torch eager and ORT's CUDA provider: its own table after the main one
#                                                                                      at most 100 s
# Under 8 minutes of device time in all. A check the host cannot do says "not run: <why>" in its row;
# one that runs past its limit is cut and says so. rtd need not be installed: without it the script
# points Python at this checkout through a throw-away package tree. Exits 0 unless it cannot write OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench/RESULTS.md}
PY=${PY:-python3}
# (j)'s subset: ops the zoo and the fused steps lean on, cold NVRTC compiles kept to a minute
NODE_CASES="cuda and (test_relu or test_add_bcast or test_matmul_2d or test_gemm_default or test_softmax_axis_1 \
or test_layer_normalization_2d or test_gelu or test_erf or test_sigmoid or test_conv_with_strides or test_transpose_default \
or test_reduce_mean_default or test_gather_0 or test_where_example or test_batchnorm_epsilon or test_maxpool_2d_default)"

if ! "$PY" -c "import rtd.kernels" 2>/dev/null; then
    SHIM=$(mktemp -d)
    trap 'rm -rf "$SHIM"' EXIT
    mkdir "$SHIM/rtd"
    for entry in rtd/*; do ln -s "$PWD/$entry" "$SHIM/rtd/"; done
    for folder in loader kernels sandbox daemon policies; do ln -s "$PWD/$folder" "$SHIM/rtd/$folder"; done
    export PYTHONPATH="$SHIM:$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi

note() { printf '%s\n' "$@" | tee -a "$OUT"; }

section() {   # section LABEL SECONDS COMMAND...: run it, and say so in a row when it was cut or failed
    local label=$1 limit=$2
    shift 2
    timeout "$limit" "$@"
    local rc=$?
    if [ "$rc" -eq 124 ]; then
        note "| ($label) | cut at its ${limit} s limit; rows above are what it measured |"
    elif [ "$rc" -ne 0 ]; then
        note "| ($label) | failed (exit $rc) |"
    fi
}

note "" "## GPU check $(date -u +%Y-%m-%dT%H:%MZ)" ""
HOST_GPU=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -n 1)
note "host: ${HOST_GPU:-no nvidia-smi}; kernel $(uname -r)" \
     "python: $("$PY" -c 'import sys; print(sys.version.split()[0])'), cupy $("$PY" -c 'import cupy; print(cupy.__version__)' 2>/dev/null || echo 'not installed'), torch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo 'not installed'), onnxruntime $("$PY" -c 'import onnxruntime as o; print(o.__version__, o.get_available_providers())' 2>/dev/null || echo 'not installed')" \
     "driver gate: $("$PY" -c 'from rtd.sandbox import gpu; print(gpu.driver_status())' 2>&1 | tail -n 1)" \
     "command: bash bench/gpu_check.sh" "" "| check | result |" "|---|---|"

section a 90 "$PY" bench/gpu_check.py calls "$OUT"
section "b-d" 90 "$PY" bench/gpu_check.py confined "$OUT"
section e 45 "$PY" bench/gpu_check.py watch "$OUT"
section "f,g" 45 "$PY" bench/gpu_check.py budget "$OUT"
section "h,i" 60 "$PY" bench/gpu_check.py serve "$OUT"

J="(j) \`_cuda\` ONNX node cases (subset)"
if ! "$PY" -c "import pytest" 2>/dev/null; then
    note "| $J | not run: pytest not installed |"
elif ! "$PY" -c "import cupy" 2>/dev/null; then
    note "| $J | not run: no GPU: cupy not installed |"
else
    RESULT=$(timeout 50 "$PY" -m pytest -q -p no:cacheprovider -rs tests/kernels/test_onnx_node.py -k "$NODE_CASES" 2>&1 \
             | grep -E '(passed|failed|skipped|error)' | tail -n 1)
    note "| $J | ${RESULT:-cut at its 50 s limit} |"
fi

section k 100 "$PY" bench/gpu_check.py zoo "$OUT"
exit 0
