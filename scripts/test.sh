#!/usr/bin/env bash
# The test command: set up, lint (ruff), then run the whole suite (root-only tests skip with a reason otherwise).
# One line per test file: the time since the start, the file, its tests, its own time; the slowest files run
# last and say how long they take (tests/progress.py). 19 minutes on a quiet 2-core host (a fresh clone, set-up included), 42 at load 7 (README).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
exec .venv/bin/python -m pytest -p no:cacheprovider -o console_output_style=times --progress --durations=15 "$@" tests
