"""bench/gpu_check.sh on a host without a GPU: it exits 0 and every check of its dated table
says "not run: <why>" in a row of its own (on a GPU host it runs: bench/RESULTS.md)."""
import os
import re
import subprocess
import sys

import pytest

from rtd.kernels import backend_cupy

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.skipif(backend_cupy.unavailable_reason() is None, reason="this host has a GPU: the check runs for real there")
def test_the_gpu_check_says_not_run_for_every_check_and_exits_0(tmp_path):
    out = tmp_path / "results.md"
    done = subprocess.run(["bash", os.path.join(REPO, "bench", "gpu_check.sh"), str(out)], cwd=REPO, capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, PY=sys.executable))
    assert done.returncode == 0, done.stderr[-2000:]
    text = out.read_text()
    assert re.search(r"^## GPU check \d{4}-\d\d-\d\dT\d\d:\d\dZ$", text, re.M) and "| check | result |" in text
    rows = [line for line in text.splitlines() if re.match(r"\| \([a-k]'?\) ", line)]
    labels = [re.match(r"\| \(([a-k]'?)\)", line).group(1) for line in rows]
    assert sorted(labels) == sorted(["a", "b", "c", "d", "a'", "e", "f", "g", "h", "i", "j", "k"]), labels
    assert all(re.search(r"\| not run: \S.*\|$", line) for line in rows), [r for r in rows if "not run: " not in r]
