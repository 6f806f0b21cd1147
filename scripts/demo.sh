#!/usr/bin/env bash
# README's first command: set up, start rtd on its embedded default (state in a temporary
# directory, gRPC on a Unix socket, a dev tenant with a fresh signing key and token), pack
# and sign a small demo model with that key, load it over gRPC into the tenant's confined
# worker, run it, print the result, and stop the daemon cleanly. Needs root (namespaces,
# cgroups) on Debian 12.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=.venv/bin/python
RTD=.venv/bin/rtd
RTCTL=.venv/bin/rtctl
export RTD_STATE_DIR="${RTD_STATE_DIR:-$(mktemp -d /tmp/rtd-demo.XXXXXX)/state}"
work="$(dirname "$RTD_STATE_DIR")"
log="$work/rtd.log"
"$RTD" serve --state-dir "$RTD_STATE_DIR" 2>"$log" &
daemon=$!
stop() { kill -TERM "$daemon" 2>/dev/null && wait "$daemon" || true; }
trap stop EXIT
for _ in $(seq 1 300); do
  grep -q "serving on" "$log" && break
  kill -0 "$daemon" 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.1
done
sed 's/^/  /' "$log"

echo "== a demo model: Y = Relu(X·W + b), built with onnx.helper"
"$PY" - "$work" <<'PYEOF'
import sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper
w = numpy_helper.from_array(np.array([[1, -1, 0.5], [2, 0, -1], [0, 1, 1], [-1, 2, 0]], np.float32), "W")
b = numpy_helper.from_array(np.array([0.1, -0.2, 0.3], np.float32), "B")
graph = helper.make_graph(
    [helper.make_node("MatMul", ["X", "W"], ["H"]), helper.make_node("Add", ["H", "B"], ["Z"]),
     helper.make_node("Relu", ["Z"], ["Y"])], "demo",
    [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])],
    [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 3])], [w, b])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
open(f"{sys.argv[1]}/demo.onnx", "wb").write(model.SerializeToString())
np.save(f"{sys.argv[1]}/x.npy", np.array([[1, 2, 3, 4], [0.5, -1, 2, 0]], np.float32))
PYEOF

echo "== rtctl pack (signed with the dev tenant's key) and rtctl load (over gRPC)"
"$RTCTL" pack "$work/demo.onnx" --name demo --version 1.0.0 --key "$RTD_STATE_DIR/dev-keys/signing.pem" --out "$work/demo.tar"
"$RTCTL" load "$work/demo.tar"
echo "== rtctl run (inside the dev tenant's confined worker)"
"$RTCTL" run demo --input "X=$work/x.npy"
"$RTCTL" list
"$RTCTL" status
"$RTCTL" status --json | "$PY" -c "import json,sys; i=json.load(sys.stdin)['tenants'][0]['models']['demo']['serving']['instances'][0]; print('worker pid', i['pid'], 'layers:', ', '.join(f'{k}={v.split()[0]}' for k, v in i['layers'].items()))"
trap - EXIT
stop
echo "== daemon stopped cleanly: $(tail -1 "$log")"
