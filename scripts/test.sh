#!/usr/bin/env bash
# The test command: set up, then run the whole suite (root-only tests skip with a reason otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@" tests
