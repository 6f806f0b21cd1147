#!/usr/bin/env bash
# Installs what rtd needs on a fresh Debian machine: apt packages, a venv in .venv, rtd itself.
# Idempotent and quick when nothing changed (a stamp holds the hash of the install inputs).
set -euo pipefail
cd "$(dirname "$0")/.."
APT_PACKAGES=(libseccomp2 python3-venv systemd openssl coreutils iproute2 libgomp1  # libgomp1: LightGBM (tests)
              libnghttp2-dev  # the HTTP/2 session (daemon/transport/h2session.c) is built on libnghttp2
              gcc libc6-dev python3-dev)  # build kernels/native (the compiled CPU kernels) at install time
missing=()
for p in "${APT_PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ] && [ "$(id -u)" = 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
stamp=.venv/.rtd-installed
want=$(cat pyproject.toml setup.py kernels/native/*.[ch] kernels/native/build_native.py sandbox/sigsys.[ch] sandbox/build_sigsys.py \
       daemon/transport/h2session.[ch] daemon/transport/build_h2session.py | sha256sum | cut -d' ' -f1)  # a changed C file rebuilds
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip 2>&1 | grep -v WARNING || true
  .venv/bin/pip install -q -e '.[test]' 2>&1 | grep -vE 'WARNING|^ *$|!!' || true
  .venv/bin/python -c "import rtd.kernels, rtd.loader, rtd.sandbox, rtd.daemon, rtd.kernels.native._compiled, rtd.sandbox._sigsys, rtd.daemon.transport._h2session"
  echo "$want" > "$stamp"
fi
