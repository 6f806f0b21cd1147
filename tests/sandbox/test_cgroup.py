"""Worker cgroups on this host's real hierarchies: the tenant node's limits written where the
host has the controller, join, populated, hard kill, removal. What the host lacks is skipped,
saying so."""
import itertools
import os
import signal
import threading
import time

import pytest
from sandbox_workers import join

from rtd.errors import Code, RtdError
from rtd.sandbox import load_policy
from rtd.sandbox.cgroup import WorkerCgroup, detect_layout

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="creating cgroups needs root"),
              pytest.mark.usefixtures("no_cgroup_leftovers")]
LIMITS = load_policy({"limits": {"memory_bytes": 96 << 20, "pids": 12, "cpu_cores": 0.5, "cpu_weight": 300}}).limits
INSTANCE = f"rc{os.getpid()}"


def read(path):
    with open(path) as f:
        return f.read().strip()


@pytest.fixture
def leaf():
    cg = WorkerCgroup.create(detect_layout(), "auto", INSTANCE, "cgtest", f"{INSTANCE}-0", LIMITS)
    yield cg
    cg.kill()
    cg.remove()


def test_limits_are_written_on_the_tenant_node_in_the_hierarchy_that_drives_each_resource(leaf):
    layout, node = leaf.layout, leaf.tenant_dirs
    checked = 0
    for resource, v1_file, v2_file, expected_v1, expected_v2 in [
            ("memory", "memory.limit_in_bytes", "memory.max", str(96 << 20), str(96 << 20)),
            ("pids", "pids.max", "pids.max", "12", "12"),
            ("cpu", "cpu.cfs_quota_us", "cpu.max", "50000", "50000 100000"),
            ("cpu", "cpu.shares", "cpu.weight", "3072", "300")]:
        home = layout.home(resource)
        hierarchy, name, expected = (resource, v1_file, expected_v1) if home == "v1" else ("v2", v2_file, expected_v2)
        if home:
            assert os.path.dirname(leaf.dirs[hierarchy]) == node[hierarchy]
            assert read(os.path.join(node[hierarchy], name)) == expected
            assert read(os.path.join(leaf.dirs[hierarchy], name)) != expected   # the leaf inherits, holds none
            checked += 1
    if layout.home("memory") == "v1" and os.path.exists(os.path.join(node["memory"], "memory.memsw.limit_in_bytes")):
        assert read(os.path.join(node["memory"], "memory.memsw.limit_in_bytes")) == str(96 << 20)
    assert checked == sum(layout.home(r) is not None for r in ("memory", "pids", "cpu", "cpu"))
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
    join(leaf, pid)
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
        WorkerCgroup.create(layout, "/cgroup.procs", INSTANCE, "x", f"{INSTANCE}-bad", limits)   # a file, not a dir
    assert e.value.code is Code.E_CONTAINMENT


def test_the_tenant_node_outlives_its_first_worker_and_goes_with_its_last():
    layout = detect_layout()
    first = WorkerCgroup.create(layout, "auto", INSTANCE, "cgtest", f"{INSTANCE}-1", LIMITS)
    second = WorkerCgroup.create(layout, "auto", INSTANCE, "cgtest", f"{INSTANCE}-2", LIMITS)
    assert first.tenant_dirs == second.tenant_dirs
    first.remove()
    assert not any(os.path.exists(d) for d in first.dirs.values())
    assert all(os.path.isdir(d) for d in second.tenant_dirs.values())
    usage = second.tenant_usage()
    assert usage["memory_limit_bytes"] == (96 << 20 if layout.home("memory") else None)
    assert usage["pids_limit"] == (12 if layout.home("pids") else None) and usage["pids"] == 0
    second.remove()
    for hierarchy, node in second.tenant_dirs.items():
        assert not os.path.exists(node) and not os.path.exists(os.path.dirname(node))   # tenant and instance nodes
        base = layout.base(hierarchy, "auto")
        assert not os.path.isdir(base) or any(e.is_dir() for e in os.scandir(base))   # "rtd" goes once empty


def test_an_absolute_parent_is_the_operators_and_never_removed():
    layout = detect_layout()
    parent = f"/rtdtest-parent-{os.getpid()}"
    made = [layout.base(h, parent) for h in layout.hierarchies()]
    for path in made:
        os.mkdir(path)
    try:
        cg = WorkerCgroup.create(layout, parent, INSTANCE, "cgtest", f"{INSTANCE}-3", LIMITS)
        assert all(d.startswith(layout.base(h, parent) + "/") for h, d in cg.dirs.items())
        cg.remove()
        assert all(os.path.isdir(p) and not any(e.is_dir() for e in os.scandir(p)) for p in made)   # kept, emptied
    finally:
        for path in made:
            os.rmdir(path)   # fails if anything was left in it


def test_workers_of_one_tenant_come_and_go_at_once_and_every_leaf_sits_under_the_limit():
    """A leaf's removal prunes the tenant node whenever it is empty, also while another
    worker's leaf is being made below it: that one must find the node again, limits and all."""
    layout, failures, leaves = detect_layout(), [], itertools.count(100)

    def churn():
        try:
            for _ in range(150):
                cg = WorkerCgroup.create(layout, "auto", INSTANCE, "cgrace", f"{INSTANCE}-{next(leaves)}", LIMITS)
                try:
                    assert cg.tenant_usage()["pids_limit"] == (12 if layout.home("pids") else None)
                finally:
                    cg.remove()
        except (RtdError, AssertionError) as e:
            failures.append(e)
    threads = [threading.Thread(target=churn) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
