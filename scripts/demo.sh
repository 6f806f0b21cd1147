#!/usr/bin/env bash
# README's first command: set up, start rtd on its embedded default (state in a temporary
# directory, a dev tenant with a fresh signing key and token), pack and sign a small demo model
# with that key, load it over gRPC into the tenant's confined worker, run it, print the result,
# and stop the daemon cleanly. One line per stage. The temporary directory (keys, tokens, the
# daemon's log) is removed at exit, however the demo ends; `--keep` (or RTD_DEMO_KEEP=1) keeps it
# and says where. Needs root (namespaces, cgroups) on Debian 12.
set -euo pipefail
cd "$(dirname "$0")/.."
keep="${RTD_DEMO_KEEP:-}"
[ "${1:-}" = "--keep" ] && keep=1
echo "== setting up (scripts/setup.sh: apt packages, .venv, rtd)"
bash scripts/setup.sh
PY=.venv/bin/python
RTD=.venv/bin/rtd
RTCTL=.venv/bin/rtctl
work="$(mktemp -d /tmp/rtd-demo.XXXXXX)"
export RTD_STATE_DIR="$work/state"
log="$work/rtd.log"
daemon=""
finish() {
  if [ -n "$daemon" ]; then kill -TERM "$daemon" 2>/dev/null && wait "$daemon" || true; fi
  if [ -n "$keep" ]; then echo "== kept $work (state, keys, tokens, rtd.log)"; else rm -rf "$work"; fi
}
trap finish EXIT
echo "== starting rtd serve on its embedded default, state in $RTD_STATE_DIR"
"$RTD" serve 2>"$log" &
daemon=$!
for _ in $(seq 1 300); do
  grep -q "serving on" "$log" && break
  kill -0 "$daemon" 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.1
done
sed 's/^/  /' "$log"

echo "== a demo model: Y = Relu(X·W + b), built with onnx.helper (rtd/demo.py)"
"$PY" -m rtd.demo "$work"

echo "== rtctl pack (signed with the dev key rtd serve made) and rtctl load (over gRPC)"
"$RTCTL" pack "$work/model.onnx" --name demo --version 1.0.0 --key "$RTD_STATE_DIR/dev-keys/signing.pem" --out "$work/demo.tar"
"$RTCTL" load "$work/demo.tar"
echo "== rtctl run (inside the dev tenant's confined worker)"
"$RTCTL" run demo --input "X=$work/x.npy"
"$RTCTL" list
"$RTCTL" status
"$RTCTL" status --json | "$PY" -c "import json,sys; i=json.load(sys.stdin)['tenants'][0]['models']['demo']['serving']['instances'][0]; print('worker pid', i['pid'], 'layers:', ', '.join(f'{k}={v.split()[0]}' for k, v in i['layers'].items()))"
kill -TERM "$daemon" && wait "$daemon"
daemon=""
echo "== daemon stopped cleanly: $(tail -1 "$log")"
