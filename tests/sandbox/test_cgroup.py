"""Per-worker cgroups on this host's real hierarchies: limits written where the host has
the controller, join, populated, hard kill, removal. What the host lacks is skipped, saying so."""
import os
import signal
import time

import pytest

from rtd.errors import Code, RtdError
from rtd.sandbox import load_policy
from rtd.sandbox.cgroup import WorkerCgroup, detect_layout

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="creating cgroups needs root"),
              pytest.mark.usefixtures("no_cgroup_leftovers")]
LIMITS = load_policy({"limits": {"memory_bytes": 96 << 20, "pids": 12, "cpu_cores": 0.5}}).limits


def read(path):
    with open(path) as f:
        return f.read().strip()


@pytest.fixture
def leaf():
    cg = WorkerCgroup.create(detect_layout(), "auto", "cgtest", f"rc{os.getpid()}-cg", LIMITS)
    yield cg
    cg.kill()
    cg.remove()


def test_limits_are_written_in_the_hierarchy_that_drives_each_resource(leaf):
    layout = leaf.layout
    checked = 0
    for resource, v1_file, v2_file, expected_v1, expected_v2 in [
            ("memory", "memory.limit_in_bytes", "memory.max", str(96 << 20), str(96 << 20)),
            ("pids", "pids.max", "pids.max", "12", "12"),
            ("cpu", "cpu.cfs_quota_us", "cpu.max", "50000", "50000 100000")]:
        home = layout.home(resource)
        if home == "v1":
            assert read(os.path.join(leaf.dirs[resource], v1_file)) == expected_v1
            checked += 1
        elif home == "v2":
            assert read(os.path.join(leaf.dirs["v2"], v2_file)) == expected_v2
            checked += 1
    if layout.home("memory") == "v1" and os.path.exists(os.path.join(leaf.dirs["memory"], "memory.memsw.limit_in_bytes")):
        assert read(os.path.join(leaf.dirs["memory"], "memory.memsw.limit_in_bytes")) == str(96 << 20)
    assert checked == sum(layout.home(r) is not None for r in ("memory", "pids", "cpu"))
    if not layout.v2_controllers:
        print(f"v2 limit files untested: the v2 hierarchy at {layout.v2_root} has no controllers on this host")


def test_join_populated_hard_kill(leaf):
    joined_r, joined_w = os.pipe()
    forked_r, forked_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.read(joined_r, 1)
            if os.fork() == 0:    # a grandchild in its own session: the kill must still reach it
                os.setsid()
                time.sleep(60)
                os._exit(0)
            os.write(forked_w, b"x")
            time.sleep(60)
        finally:
            os._exit(0)
    for path in leaf.procs_files:
        with open(path, "w") as f:
            f.write(str(pid))
    os.write(joined_w, b"x")
    os.read(forked_r, 1)
    for fd in (joined_r, joined_w, forked_r, forked_w):
        os.close(fd)
    assert leaf.populated() and leaf.usage()["pids"] == 2
    leaf.kill()
    _, status = os.waitpid(pid, 0)
    assert os.WTERMSIG(status) == signal.SIGKILL
    deadline = time.monotonic() + 5
    while leaf.populated() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not leaf.populated()


def test_impossible_parent_refuses_and_leaves_nothing(tmp_path):
    limits = load_policy({"limits": {"pids": 4}}).limits
    layout = detect_layout()
    with pytest.raises(RtdError) as e:
        WorkerCgroup.create(layout, "/cgroup.procs", "x", f"rc{os.getpid()}-bad", limits)   # a file, not a dir
    assert e.value.code is Code.E_CONTAINMENT
