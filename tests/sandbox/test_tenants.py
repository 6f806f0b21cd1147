"""Tenant budgets, instance ids and leftovers on this host's real cgroups: a tenant's workers
share one tenant node that carries the policy's limits, each worker in a leaf of its own;
two rtd instances never share a directory; cleanup_instance removes what a daemon killed
with SIGKILL left behind, killing what still runs there."""
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from sandbox_workers import join, received, start_echo, stop

from rtd import wire
from rtd.errors import Code, RtdError
from rtd.sandbox import TenantIdentity, Zygote, cleanup_instance, detect_layout, load_policy
from rtd.sandbox.cgroup import WorkerCgroup

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="cgroups and confined workers need root"),
              pytest.mark.usefixtures("no_cgroup_leftovers")]
ACME = TenantIdentity("acme", 61030, 61030)
MIB = 1 << 20


@pytest.fixture(scope="module")
def zygote():
    z = Zygote.start(preload=("rtd.sandbox.echo", __name__), spares=False)
    yield z
    z.close()


def hold_memory(sock, nbytes):
    """Inside a worker: allocate and touch `nbytes`, say so, hold them until EOF."""
    held = np.ones(nbytes // 8)
    wire.send(sock, wire.Kind.OK, 0, {"held": int(held.nbytes)})
    try:
        wire.Reader(sock).recv()
    except EOFError:
        pass


def start_holding(zygote, policy, nbytes):
    ours, theirs = socket.socketpair()
    handle = zygote.spawn(f"{__name__}:hold_memory", policy=policy, identity=ACME, sock=theirs, args=(nbytes,))
    theirs.close()
    return handle, ours


def test_two_workers_of_a_tenant_share_its_node_and_its_memory_limit(zygote):
    """Each worker alone stays under the limit (150 of 256 MiB); together they cannot: the
    tenant node's limit is shared, and the OOM kill is counted on the victim's own leaf."""
    policy = load_policy({"limits": {"memory_bytes": 256 * MIB}})
    a, sock_a = start_holding(zygote, policy, 150 * MIB)
    assert received(sock_a) == {"held": 150 * MIB}
    b, sock_b = start_holding(zygote, policy, 150 * MIB)
    assert a.cgroup.tenant_dirs == b.cgroup.tenant_dirs and set(a.cgroup.dirs.values()).isdisjoint(b.cgroup.dirs.values())
    assert a.tenant_usage()["memory_limit_bytes"] == 256 * MIB
    b_held = received(sock_b)   # B got its memory, or it is the one the OOM killer chose
    victim, survivor = (a, b) if b_held else (b, a)
    status = victim.wait(10)
    assert status is not None, "both workers hold 150 MiB: the tenant's 256 MiB limit was not shared"
    assert (status.signal, status.layer) == (signal.SIGKILL, "memory") and "oom_kill=1" in status.reason, status
    assert survivor.alive() and survivor.usage()["oom_kills"] == 0
    usage = survivor.tenant_usage()
    assert usage["memory_bytes"] >= survivor.usage()["memory_bytes"] >= 150 * MIB > usage["memory_limit_bytes"] - 150 * MIB
    sock_a.close()
    sock_b.close()
    assert survivor.wait(10).code == 0


def test_a_fork_the_pids_limit_refuses_is_named_with_the_limit(zygote):
    """pids = 4: two echo workers (a helper and a worker each) fill the tenant's node; a third
    worker's fork is refused by the kernel, and the refusal says which limit and its value."""
    policy = load_policy({"limits": {"pids": 4}})
    identity = TenantIdentity("pidcap", 61031, 61031)
    workers = [start_echo(zygote, identity, policy) for _ in range(2)]
    try:
        with pytest.raises(RtdError) as e:
            start_echo(zygote, identity, policy)
        assert e.value.code is Code.E_RESOURCE_EXHAUSTED and e.value.detail.startswith("pids: "), e.value
        assert "limits.pids 4" in e.value.detail, e.value
    finally:
        for handle, sock in workers:
            stop(handle, sock)


def test_instance_ids_keep_two_zygotes_apart():
    layout = detect_layout()
    first = Zygote.start(preload=("rtd.sandbox.echo",), spares=False, instance=f"ta{os.getpid()}")
    second = Zygote.start(preload=("rtd.sandbox.echo",), spares=False, instance=f"tb{os.getpid()}")
    try:
        a, sock_a = start_echo(first, ACME)
        b, sock_b = start_echo(second, ACME)
        for hierarchy in layout.hierarchies():
            base = layout.base(hierarchy, "auto")
            assert a.cgroup.dirs.get(hierarchy) in (None, os.path.join(base, first.instance, "acme", a.id))
            assert b.cgroup.dirs.get(hierarchy) in (None, os.path.join(base, second.instance, "acme", b.id))
        stop(a, sock_a)
        assert not any(os.path.exists(os.path.join(layout.base(h, "auto"), first.instance)) for h in layout.hierarchies())
        assert all(os.path.isdir(d) for d in b.cgroup.tenant_dirs.values())   # the other instance's tenant is untouched
        stop(b, sock_b)
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize("bad", ["", "a/b", "..", "x" * 65, "é", "a b"])
def test_an_instance_id_that_cannot_name_a_directory_is_refused(bad):
    with pytest.raises(RtdError) as e:
        Zygote.start(spares=False, instance=bad)
    assert e.value.code is Code.E_POLICY_INVALID
    with pytest.raises(RtdError):
        cleanup_instance(detect_layout(), "auto", bad)


KILLED_DAEMON = """
import socket, sys
from rtd.sandbox import TenantIdentity, Zygote
zygote = Zygote.start(preload=("rtd.sandbox.echo",), instance=sys.argv[1])
ours, theirs = socket.socketpair()
handle = zygote.spawn("rtd.sandbox.echo:serve", identity=TenantIdentity("acme", 61030, 61030), sock=theirs)
zygote.settle()
print(handle.id, zygote.spares()[0].id, flush=True)
sys.stdin.read()
"""


def test_cleanup_instance_removes_what_a_killed_daemon_left():
    layout, instance = detect_layout(), f"crashed{os.getpid()}"
    daemon = subprocess.Popen([sys.executable, "-c", KILLED_DAEMON, instance], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    worker, spare = daemon.stdout.readline().split()
    daemon.kill()
    daemon.wait()
    left = [os.path.join(layout.base(h, "auto"), instance) for h in layout.hierarchies()]
    assert all(os.path.isdir(os.path.join(d, "acme", w)) for d in left for w in (worker, spare))   # what SIGKILL leaves
    straggler = WorkerCgroup.create(layout, "auto", instance, "acme", "straggler", load_policy().limits)
    pid = os.fork()
    if pid == 0:   # a process that outlived its daemon, still in a leftover leaf
        try:
            time.sleep(60)
        finally:
            os._exit(0)
    join(straggler, pid)
    other = WorkerCgroup.create(layout, "auto", f"rc{os.getpid()}", "acme", f"rc{os.getpid()}-800", load_policy().limits)
    try:
        removed = cleanup_instance(layout, "auto", instance)
        assert os.WTERMSIG(os.waitpid(pid, 0)[1]) == signal.SIGKILL
        assert not any(os.path.exists(d) for d in left)
        for d in left:   # deepest first
            assert removed.index(os.path.join(d, "acme", worker)) < removed.index(os.path.join(d, "acme")) < removed.index(d)
        assert all(os.path.isdir(d) for d in other.dirs.values())   # another instance is not touched
        assert cleanup_instance(layout, "auto", instance) == []
    finally:
        other.remove()
