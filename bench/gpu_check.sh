#!/usr/bin/env bash
# The GPU check of issue 11, for an NVIDIA host with its own CuPy, PyTorch and (if present)
# onnxruntime-gpu, offline:
#   bench/gpu_check.sh [OUT.md]        (PY=python to choose the interpreter; OUT defaults to bench/RESULTS.md)
# Appends one dated section to OUT as it goes, so a run cut short keeps what it measured:
#   (a) a subset of the `_cuda` ONNX node cases (pytest)             at most  50 s
#   (b) the zoo: ResNet-50 b1, BERT-base b1/b8, MiniLM b8 on rtd-cuda  at most 150 s
#       (checked against rtd-cpu) beside torch eager and ORT's CUDA provider
#   (c) confined worker start with a GPU, (d) per-request serving      at most  60 s
#       overhead on the GPU (tritonclient against a real rtd serve)
#   (e) raw cudaMalloc past the tenant's GPU budget in a confined     at most  35 s
#       worker (the NVML watcher's poll→kill latency), then a request
#       past it through the daemon
# Under 5 minutes in all. A section the host cannot do says "not run: <why>"; one that runs
# past its limit is cut and says so. rtd need not be installed: without it the script points
# Python at this checkout through a throw-away package tree.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench/RESULTS.md}
PY=${PY:-python3}
# (a)'s subset: ops the zoo and the fused steps lean on, cold NVRTC compiles kept to a minute
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

section() {   # section LABEL SECONDS COMMAND...: run it, and say so when it was cut or failed
    local label=$1 limit=$2
    shift 2
    timeout "$limit" "$@"
    local rc=$?
    if [ "$rc" -eq 124 ]; then
        note "($label) cut at its ${limit} s limit; rows above are what it measured"
    elif [ "$rc" -ne 0 ]; then
        note "($label) failed (exit $rc)"
    fi
}

note "" "## GPU check $(date -u +%Y-%m-%dT%H:%MZ)" ""
HOST_GPU=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -n 1)
note "host: ${HOST_GPU:-no nvidia-smi}" \
     "python: $("$PY" -c 'import sys; print(sys.version.split()[0])'), cupy $("$PY" -c 'import cupy; print(cupy.__version__)' 2>/dev/null || echo 'not installed'), torch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo 'not installed'), onnxruntime $("$PY" -c 'import onnxruntime as o; print(o.__version__, o.get_available_providers())' 2>/dev/null || echo 'not installed')"

note "" "### (a) \`_cuda\` ONNX node cases (subset)" ""
if ! "$PY" -c "import pytest" 2>/dev/null; then
    note "(a) not run: pytest not installed"
else
    section a 50 bash -c "\"$PY\" -m pytest -q -p no:cacheprovider -rs tests/kernels/test_onnx_node.py -k '$NODE_CASES' 2>&1 \
        | tail -n 25 | tee /dev/stderr | grep -E '(passed|failed|skipped|error)' | tail -n 1 | sed 's/^/(a) /' >> '$OUT'"
fi

section b 150 "$PY" bench/gpu_check.py zoo "$OUT"
section c,d 60 "$PY" bench/gpu_check.py serve "$OUT"
section e 35 "$PY" bench/gpu_check.py budget "$OUT"
