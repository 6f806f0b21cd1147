#!/usr/bin/env bash
# The test command: set up, lint (ruff), then run the whole suite (root-only tests skip with a reason otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@" tests
