#!/usr/bin/env bash
# The long fuzzing mode: tests/fuzz with FUZZ_EXAMPLES inputs per property (default 1 000 000).
# Each target runs as FUZZ_SHARDS processes (default 1) of FUZZ_EXAMPLES/FUZZ_SHARDS inputs
# each, FUZZ_JOBS processes at a time (default the CPU count), each logging to
# $FUZZ_LOGS/<target>.<shard>.log (default a fresh /tmp/rtd-fuzz.* directory; nothing is
# written in the repository). CI runs the same properties with small defaults in tests/.
#
#   FUZZ_EXAMPLES=1000000 bash scripts/fuzz.sh                    # every target
#   FUZZ_EXAMPLES=20000 bash scripts/fuzz.sh wire kserve          # some of them
#   FUZZ_EXAMPLES=1000000 FUZZ_SHARDS=16 bash scripts/fuzz.sh wire  # one target on 16 cores
#
# Targets: wire (rtd/wire.py Reader), channel (daemon/serving/channel.py WorkerChannel on asyncio
# and uvloop), kserve (the supervisor's header reading, rtd/infer_request.py, against protobuf's own
# parser, and the worker's decoding of gRPC and REST bodies, daemon/worker/kserve_codec.py), http2
# (daemon/transport/grpc_h2.py Connection behind the real gRPC front), intake (verify_package over
# uploads, tar/tar.gz and directories, and the signed documents), config (config.pbtxt).
# A target's file also holds the regression tests for the bugs the fuzzer found; they run once
# per shard, in seconds. A property tolerates nothing: the first input it fails on ends it,
# and the shard's log shows that input (shrunk) and the blob to reproduce it.
#
# How long 1 M inputs take, per property on one core: rates measured on the 2-core CI machine
# (both cores busy, the host shared) with 5 000 inputs per property, 20 000 for kserve and
# 100 000 for config, then extrapolated linearly:
#   wire     hostile streams ~50/s (5.6 h), honest frames ~130/s (2.1 h)          7.7 h
#   channel  hostile workers ~48/s (5.8 h)                                         5.8 h
#   kserve   decode_request ~230/s (1.2 h), parse then decode ~215/s (1.3 h)      2.5 h
#   http2    hostile clients ~86/s (3.2 h)                                         3.2 h
#   intake   uploads ~180/s (1.5 h), tar archives ~80-120/s (2.3-3.5 h),
#            directories ~80-100/s (2.8-3.5 h), signed documents ~210/s (1.3 h)   ~9 h
#   config   ~360-445/s (0.7 h)                                                    0.7 h
# about 29 CPU-hours for every target: ~15 h on 2 cores; with FUZZ_SHARDS=16 on 16 cores, ~2 h.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

declare -A FILES=(
  [wire]=tests/fuzz/test_wire_reader.py [channel]=tests/fuzz/test_worker_channel.py
  [kserve]=tests/fuzz/test_kserve_request.py [http2]=tests/fuzz/test_http2_connection.py
  [intake]=tests/fuzz/test_package_intake.py [config]=tests/fuzz/test_model_config.py
)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(wire channel kserve http2 intake config)
for t in "${targets[@]}"; do
  [ -n "${FILES[$t]:-}" ] || { echo "unknown target '$t' (one of: ${!FILES[*]})" >&2; exit 2; }
done
total="${FUZZ_EXAMPLES:-1000000}"
shards="${FUZZ_SHARDS:-1}"
jobs="${FUZZ_JOBS:-$(nproc)}"
logs="${FUZZ_LOGS:-$(mktemp -d /tmp/rtd-fuzz.XXXXXX)}"
mkdir -p "$logs"
echo "fuzz: ${targets[*]} with $total inputs per property in $shards shard(s), $jobs processes at a time; logs in $logs"

run_shard() {   # target shard: one pytest process over the target's properties
  local rc=0
  FUZZ_EXAMPLES=$(( (total + shards - 1) / shards )) .venv/bin/python -m pytest -q -s -p no:cacheprovider \
    --timeout=0 "${FILES[$1]}" >"$logs/$1.$2.log" 2>&1 || rc=$?
  echo "$rc" >"$logs/$1.$2.rc"
}

for t in "${targets[@]}"; do
  for ((i = 0; i < shards; i++)); do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 1; done
    run_shard "$t" "$i" &
  done
done
wait

status=0
for t in "${targets[@]}"; do
  for ((i = 0; i < shards; i++)); do
    rc=$(cat "$logs/$t.$i.rc")
    echo "== $t shard $i: $([ "$rc" = 0 ] && echo passed || echo "FAILED (exit $rc, see $logs/$t.$i.log)")"
    grep -E '^fuzz .* inputs in ' "$logs/$t.$i.log" | sed 's/^/   /' || true
    [ "$rc" = 0 ] || status=1
  done
done
exit $status
