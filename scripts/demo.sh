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

echo "== a demo model: Y = Relu(X·W + b), built with onnx.helper (rtd/demo.py)"
"$PY" -m rtd.demo "$work"

echo "== rtctl pack (signed with the dev tenant's key) and rtctl load (over gRPC)"
"$RTCTL" pack "$work/model.onnx" --name demo --version 1.0.0 --key "$RTD_STATE_DIR/dev-keys/signing.pem" --out "$work/demo.tar"
"$RTCTL" load "$work/demo.tar"
echo "== rtctl run (inside the dev tenant's confined worker)"
"$RTCTL" run demo --input "X=$work/x.npy"
"$RTCTL" list
"$RTCTL" status
"$RTCTL" status --json | "$PY" -c "import json,sys; i=json.load(sys.stdin)['tenants'][0]['models']['demo']['serving']['instances'][0]; print('worker pid', i['pid'], 'layers:', ', '.join(f'{k}={v.split()[0]}' for k, v in i['layers'].items()))"
trap - EXIT
stop
echo "== daemon stopped cleanly: $(tail -1 "$log")"
