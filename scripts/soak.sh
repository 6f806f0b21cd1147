#!/usr/bin/env bash
# Long soak (not in CI): repeats the randomized tests — hypothesis properties (fusion, memory
# planning, single-byte package tampering), zoo models on fresh random inputs, and the daemon's
# fault injection (worker SIGKILL, OOM, crash loops) — with new seeds each round, until
# SOAK_SECONDS (default 3600) have passed. Stops at the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
end=$(( $(date +%s) + ${SOAK_SECONDS:-3600} ))
round=0
while [ "$(date +%s)" -lt "$end" ]; do
  round=$((round + 1))
  echo "== soak round $round"
  .venv/bin/python -m pytest -q -p no:cacheprovider -x \
    tests/kernels/test_fusion_properties.py tests/kernels/test_memory_plan.py \
    tests/security/test_packages.py tests/zoo tests/daemon/test_faults.py
done
echo "soak: $round rounds passed"
