#!/usr/bin/env bash
# Installs rtd as a systemd service on this host (as root, from a checkout):
#
#   bash scripts/install.sh                # rtd into /opt/rtd, unit enabled where systemd runs
#   bash scripts/install.sh --root DIR     # stage the same files under DIR (packaging, tests)
#
# What lands where (the unit's ExecStart, ReadWritePaths and ConditionPathExists name these):
#   /opt/rtd/                     a virtualenv holding rtd and its runtime dependencies
#   /usr/local/bin/rtd, rtctl     links into /opt/rtd/bin
#   /etc/systemd/system/rtd.service
#   /etc/systemd/system/rtd.service.d/gpu.conf   only where /dev/nvidiactl exists (NVIDIA GPUs for the workers)
#   /usr/lib/sysusers.d/rtd.conf  the rtd group (socket access)
#   /usr/lib/tmpfiles.d/rtd.conf  /run/rtd (root:rtd 0750)
#   /etc/rtd/rtd.toml             the shipped config, only when none is there yet (an edited one is kept)
#   /usr/share/doc/rtd/README.md
# Re-running upgrades rtd in place and leaves /etc/rtd and /var/lib/rtd (models, tokens, trust) alone.
set -euo pipefail
root=/
while [ $# -gt 0 ]; do
  case "$1" in
    --root) root=${2:?--root needs a directory}; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "install.sh: run as root (it writes /opt, /etc and /usr)" >&2; exit 2; }
checkout=$(cd "$(dirname "$0")/.." && pwd)
root=$(mkdir -p "$root" && cd "$root" && pwd)
at() { echo "${root%/}$1"; }

python=/usr/bin/python3   # Debian's own (PGO and LTO), not a python3 earlier on PATH
[ -x "$python" ] || python=python3
"$python" -m venv "$(at /opt/rtd)"
"$(at /opt/rtd)/bin/pip" install -q --upgrade pip 2>&1 | grep -v WARNING || true
"$(at /opt/rtd)/bin/pip" install -q "$checkout" 2>&1 | grep -vE 'WARNING|^ *$' || true
"$(at /opt/rtd)/bin/python" -I -c "import rtd.daemon, rtd.kernels, rtd.loader, rtd.sandbox"

install -d "$(at /usr/local/bin)" "$(at /etc/systemd/system)" "$(at /usr/lib/sysusers.d)" \
  "$(at /usr/lib/tmpfiles.d)" "$(at /usr/share/doc/rtd)"
install -d -m 0755 "$(at /etc/rtd)"
ln -sfn /opt/rtd/bin/rtd "$(at /usr/local/bin/rtd)"
ln -sfn /opt/rtd/bin/rtctl "$(at /usr/local/bin/rtctl)"
install -m 0644 "$checkout/systemd/rtd.service" "$(at /etc/systemd/system/rtd.service)"
if [ -e /dev/nvidiactl ]; then
  install -D -m 0644 "$checkout/systemd/rtd-gpu.conf" "$(at /etc/systemd/system/rtd.service.d/gpu.conf)"
fi
install -m 0644 "$checkout/systemd/rtd.sysusers.conf" "$(at /usr/lib/sysusers.d/rtd.conf)"
install -m 0644 "$checkout/systemd/rtd.tmpfiles.conf" "$(at /usr/lib/tmpfiles.d/rtd.conf)"
[ -e "$(at /etc/rtd/rtd.toml)" ] || install -m 0644 "$checkout/systemd/rtd.toml" "$(at /etc/rtd/rtd.toml)"
install -m 0644 "$checkout/README.md" "$(at /usr/share/doc/rtd/README.md)"

if [ "$root" = / ] && [ -d /run/systemd/system ]; then
  systemd-sysusers rtd.conf
  systemd-tmpfiles --create rtd.conf
  systemctl daemon-reload
  systemctl enable --now rtd.service
  echo "rtd installed and started: systemctl status rtd; tenants go in /etc/rtd/rtd.toml (then systemctl reload rtd)" >&2
else
  echo "rtd installed under $root (systemd is not running here: nothing enabled or started)" >&2
fi
