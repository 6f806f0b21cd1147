"""scripts/demo.sh as a new user runs it: one line per stage, nothing from pip or setuptools, and
its temporary directory (keys, tokens, the daemon's log) gone at exit (`--keep` keeps it: the
same exit trap, one branch)."""
import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STAGES = ("== setting up", "setup: rtd in .venv is up to date", "== starting rtd serve", "serving on",
          "== a demo model", "== rtctl pack", "loaded demo", "== rtctl run", "worker pid", "== daemon stopped cleanly")


def installed() -> bool:
    """Whether scripts/setup.sh installed this checkout as it is now (the test command runs it
    first): otherwise the demo would install, which is no test's business."""
    return subprocess.run(["bash", "scripts/setup.sh", "--check"], cwd=ROOT).returncode == 0


def test_the_demo_says_each_stage_and_leaves_nothing_behind():
    if os.geteuid() != 0:
        pytest.skip("the demo's daemon confines its workers: needs root")
    if not installed():
        pytest.skip("scripts/setup.sh has not installed this checkout (.venv/.rtd-installed): the demo would install")
    done = subprocess.run(["bash", "scripts/demo.sh"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-3000:]
    work = re.search(r"state in (/tmp/rtd-demo\.\w+)/state", said).group(1)
    at = [said.find(stage) for stage in STAGES]
    assert all(i >= 0 for i in at), [s for s, i in zip(STAGES, at) if i < 0]
    assert "Traceback" not in said and "setuptools" not in said.lower() and "WARNING" not in said, said
    assert not os.path.exists(work), f"{work} left behind"
