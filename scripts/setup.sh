#!/usr/bin/env bash
# Installs what rtd needs on a fresh Debian machine: apt packages, a venv in .venv, rtd itself.
# Idempotent and quick when nothing changed (a stamp holds the hash of the install inputs). Says one
# line per stage on stderr; what apt and pip say is kept aside and shown only when a stage fails.
# `setup.sh --check` only answers whether it would do nothing (exit 0) or install (exit 1).
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "setup: $*" >&2; }
stamp=.venv/.rtd-installed
# Debian's own python3: the interpreter python3-venv and python3-dev below are for, built with PGO and LTO. A python3
# earlier on PATH (pyenv's, say) is neither, and runs the daemon's Python about a quarter slower.
python=/usr/bin/python3
[ -x "$python" ] || python=python3
interpreter=$(readlink -f "$(command -v "$python")")
want=$({ echo "$interpreter"; cat pyproject.toml setup.py kernels/native/*.[ch] kernels/native/build_native.py sandbox/sigsys.[ch] sandbox/build_sigsys.py \
       daemon/transport/h2session.[ch] daemon/transport/build_h2session.py; } | sha256sum | cut -d' ' -f1)  # a changed C file or interpreter rebuilds
if [ "${1:-}" = --check ]; then   # whether this checkout is installed as it is now; changes nothing
  [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]
  exit
fi
APT_PACKAGES=(libseccomp2 python3-venv systemd openssl coreutils iproute2 libgomp1  # libgomp1: LightGBM (tests)
              libnghttp2-dev  # the HTTP/2 session (daemon/transport/h2session.c) is built on libnghttp2
              gcc libc6-dev python3-dev curl)  # gcc..python3-dev: build kernels/native at install time; curl: the README
missing=()
for p in "${APT_PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
log=$(mktemp /tmp/rtd-setup.XXXXXX.log)
trap 'rm -f "$log"' EXIT
quietly() {   # run a stage, its output kept for when it fails
  if ! "$@" >>"$log" 2>&1; then tail -40 "$log" >&2; say "failed: $*"; exit 1; fi
}
if [ ${#missing[@]} -gt 0 ] && [ "$(id -u)" = 0 ]; then
  say "apt packages: installing ${missing[*]}"
  quietly apt-get update -qq
  quietly env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  say "rtd in .venv is up to date"
  exit 0
fi
if [ -x .venv/bin/python ] && ! grep -qx "executable = $interpreter" .venv/pyvenv.cfg; then
  say "the virtualenv .venv was made by another interpreter: making it again with $python"
  rm -rf .venv
fi
if [ ! -x .venv/bin/python ]; then
  say "creating the virtualenv .venv"
  quietly "$python" -m venv .venv
fi
say "pip: upgrading pip"
quietly .venv/bin/pip install -q --upgrade pip
say "pip: installing rtd and its test dependencies into .venv, compiling its C kernels (minutes the first time)"
# the compiled modules are optional to the build (an install without a compiler still finishes): a C file
# that fails to compile would leave the last build's library in place, and the check below pass on it
rm -f "$stamp" kernels/native/_compiled*.so sandbox/_sigsys*.so daemon/transport/_h2session*.so   # no stamp until they are back
quietly .venv/bin/pip install -q -e '.[test]'
say "checking the install"
quietly .venv/bin/python -c "import rtd.kernels, rtd.loader, rtd.sandbox, rtd.daemon, rtd.kernels.native._compiled, rtd.sandbox._sigsys, rtd.daemon.transport._h2session"
echo "$want" > "$stamp"
say "done"
