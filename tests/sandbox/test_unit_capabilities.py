"""The sandbox under exactly rtd.service's capability bounding set (no CAP_DAC_OVERRIDE) and
no_new_privs, on a host with no rtd cgroup directory yet (cgroup_parent "auto").

On a hybrid host whose v2 tree is mode 0555 and drives no controller, creating the v2 leaf
fails with EACCES; workers must start without it, their hard kill being SIGKILL to the
namespace's pid 1, with one warning. A hierarchy that drives a controller and cannot be
written stays a refusal, and leaves nothing behind."""
import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from rtd.sandbox import detect_layout
from rtd.sandbox.cgroup import KILL_BY_PID1
from tests.progress import RTD_RUNNING

SETPRIV = shutil.which("setpriv")
UNIT = os.path.join(os.path.dirname(__file__), "..", "..", "systemd", "rtd.service")
LAYOUT = detect_layout()
pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="the capped run starts from root"),
              pytest.mark.skipif(SETPRIV is None, reason="setpriv (util-linux) is not installed")]

CAPPED_RUN = r"""
import json
import os
from rtd.errors import RtdError
from rtd.sandbox import SandboxKilled, contain, host_report, load_policy, run_confined
from rtd.sandbox.confined import DEFAULT_IDENTITY


def spin():
    while True:
        pass


report = host_report()
out = {"pid": os.getpid(), "writable": {h: w["writable"] for h, w in report["cgroup"]["writable"].items()},
       "planned_kill": report["layers"]["kill"]}
try:
    cg, layers, *_ = contain.prepare(load_policy(), DEFAULT_IDENTITY, "capped", "capped-0")
    cg.remove()
    out["kill"] = layers["kill"]
    out["result"] = run_confined(int, "7")
    try:
        run_confined(spin, timeout=0.5)
    except SandboxKilled as e:
        out["timeout"] = e.reason
except RtdError as e:
    out["refused"] = str(e)
print(json.dumps(out))
"""


def unit_bounding_set() -> str:
    with open(UNIT) as f:
        caps = re.search(r"^CapabilityBoundingSet=(.*)$", f.read(), re.M).group(1).split()
    return "-all," + ",".join("+" + c.removeprefix("CAP_").lower() for c in caps)


def run_capped(procs_files=()) -> tuple[dict, str]:
    """CAPPED_RUN under the unit's bounding set and no_new_privs, first moved into the
    cgroups of `procs_files` (as systemd places the unit's main process)."""
    shell = ('for f in "$@"; do echo $$ > "$f" || exit 97; done; '
             'exec "$SETPRIV" --bounding-set "$BOUNDING" --inh-caps -all --no-new-privs "$PYTHON" -c "$SCRIPT"')
    env = dict(os.environ, SETPRIV=SETPRIV, BOUNDING=unit_bounding_set(), PYTHON=sys.executable, SCRIPT=CAPPED_RUN)
    done = subprocess.run(["sh", "-c", shell, "sh", *procs_files], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr


@pytest.fixture
def fresh_host():
    """No rtd directory below this process's own cgroups in any hierarchy: what earlier runs
    left (no process in it) is removed, deepest first. While a running rtd has processes
    there, nothing is touched and the fresh-host case cannot be set up."""
    trees = [list(os.walk(LAYOUT.base(h, "auto"), topdown=False)) for h in LAYOUT.hierarchies()]
    for path, _, _ in (entry for tree in trees for entry in tree):
        with open(os.path.join(path, "cgroup.procs")) as f:
            if f.read().strip():
                pytest.skip(f"{path} holds processes: {RTD_RUNNING}, no fresh-host case")
    for path, _, _ in (entry for tree in trees for entry in tree):
        try:
            os.rmdir(path)
        except OSError as e:
            pytest.skip(f"{path} cannot be removed ({e.strerror}): {RTD_RUNNING}, no fresh-host case")
    yield


def assert_nothing_left(out: dict):
    """The capped run's instances (prepare's and run_confined's) are gone in every hierarchy."""
    for hierarchy in LAYOUT.hierarchies():
        base = LAYOUT.base(hierarchy, "auto")
        assert not any(os.path.exists(os.path.join(base, i)) for i in ("capped", f"rc{out['pid']}")), base


@pytest.fixture
def delegated():
    """A cgroup of the unit's own in each v1 hierarchy rtd uses, as `Delegate=cpu memory pids`
    gives a service (root's, mode 0755: writable without CAP_DAC_OVERRIDE). The v2 tree gets
    none: its root stays the 0555 mount, as on the bare host. Yields their cgroup.procs files."""
    units = [os.path.join(root, LAYOUT.own[h].lstrip("/"), f"rtdtest-unit-{os.getpid()}")
             for h, root in LAYOUT.hierarchies().items() if h != "v2"]
    for unit in units:
        os.mkdir(unit)
    yield [os.path.join(unit, "cgroup.procs") for unit in units]
    deadline = time.monotonic() + 5
    for unit in units:   # an rmdir that fails for good means the run left something in it
        while True:
            try:
                os.rmdir(unit)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)


@pytest.mark.skipif(LAYOUT.mode != "hybrid" or bool(LAYOUT.v2_controllers),
                    reason=f"needs a hybrid host whose v2 tree drives no controller (this one: {LAYOUT.mode}, "
                           f"v2 controllers {sorted(LAYOUT.v2_controllers)})")
def test_a_fresh_hybrid_host_starts_workers_without_a_v2_leaf(fresh_host, delegated):
    out, stderr = run_capped(delegated)
    if out["writable"]["v2"]:
        pytest.skip(f"{LAYOUT.v2_root} is writable without CAP_DAC_OVERRIDE here: nothing to fall back from")
    assert all(ok for h, ok in out["writable"].items() if h != "v2"), out   # the delegated v1 subtrees
    # before the fix: "E_CONTAINMENT ... cgroup setup failed: [Errno 13] Permission denied: '<v2 root>/rtd'"
    assert "refused" not in out, out["refused"]
    assert out["result"] == 7 and "timeout" in out["timeout"]
    assert out["kill"] == out["planned_kill"] == KILL_BY_PID1
    assert stderr.count("cgroup v2 tree not writable") == 1, stderr
    assert_nothing_left(out)


def test_a_hierarchy_that_drives_a_controller_and_cannot_be_written_is_a_refusal(fresh_host):
    out, stderr = run_capped()
    driving = [h for h, ok in out["writable"].items() if not ok and (h != "v2" or LAYOUT.v2_controllers)]
    if not driving:
        pytest.skip("every hierarchy that drives a controller is writable here without CAP_DAC_OVERRIDE")
    base = LAYOUT.base(driving[0], "auto")
    assert out.get("refused", "").startswith("E_CONTAINMENT") and f"Permission denied: '{base}'" in out["refused"], out
    assert "result" not in out
    assert_nothing_left(out)
