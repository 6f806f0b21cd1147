"""Armed spares for real: after a spawn the zygote arms the tenant's next worker (own leaf
cgroup, every layer in force, waiting for its job); the next spawn takes it, a different
policy never does, a spare that dies is dropped, and closing the zygote removes every spare."""
import os
import re
import signal
import socket
import time

import pytest
from sandbox_workers import proc_status, received, stop
from sandbox_workers import start_echo as start_echo_of

from rtd import wire
from rtd.sandbox import TenantIdentity, load_policy
from rtd.sandbox.escapes import BY_NAME, targets
from rtd.sandbox.zygote import Zygote

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="the zygote's workers need root"),
              pytest.mark.usefixtures("no_cgroup_leftovers")]
INITECH = TenantIdentity("initech", 61010, 61010)


@pytest.fixture(scope="module")
def zygote():
    z = Zygote.start(preload=("rtd.sandbox.echo", __name__))
    yield z
    z.close()


def attempt_worker(sock, name, context):
    """Inside a worker started from a spare: one escape attempt of the battery."""
    wire.send(sock, wire.Kind.OK, 0, BY_NAME[name].run(context))


def start_echo(zygote, policy=None, identity=INITECH):
    return start_echo_of(zygote, identity, policy)


def spare_of(zygote, identity):
    assert zygote.settle(10)
    found = [sp for sp in zygote.spares() if sp.identity == identity]
    assert len(found) == 1, zygote.spares()
    return found[0]


def leaf_pids(spare):
    return {int(p) for path in spare.cgroup.procs_files for p in open(path).read().split()}


def test_spawn_arms_a_spare_that_the_next_spawn_takes(zygote):
    stop(*start_echo(zygote))
    spare = spare_of(zygote, INITECH)
    armed = leaf_pids(spare)
    assert len(armed) == 2   # helper and worker, already in every hierarchy's leaf
    worker = next(p for p in armed if proc_status(p)["NSpid"].split()[-1] == "1")
    st = proc_status(worker)   # confined before it has a job
    assert (st["Seccomp"], st["NoNewPrivs"], st["CapEff"], st["Uid"].split()[0]) == ("2", "1", "0" * 16, "61010")
    assert os.readlink(f"/proc/{worker}/ns/net") != os.readlink("/proc/self/ns/net")
    handle, sock = start_echo(zygote)
    assert (handle.id, handle.pid) == (spare.id, worker)
    assert set(handle.startup_ms) == {"launch"}   # job hand-off to ready: the rest ran ahead
    assert len(os.listdir(f"/proc/{worker}/fd")) == 1   # the go socket is closed: only its own socket
    with open(f"/proc/{handle.pid}/cgroup") as f:
        assert all(line.rstrip().endswith(spare.id) for line in f if re.match(r"\d+:(memory|pids|cpu|):", line))
    with open(f"/proc/{handle.pid}/status") as f:
        assert "Seccomp:\t2" in f.read()
    stop(handle, sock)


def test_a_worker_started_from_a_spare_stops_real_escapes(zygote):
    with targets(load_policy()) as context:
        for name, killed in (("read_etc_shadow", False), ("write_outside_scratch", False),
                             ("connect_abstract_socket", True), ("unshare_userns", True)):
            stop(*start_echo(zygote))
            spare = spare_of(zygote, INITECH)
            ours, theirs = socket.socketpair()
            handle = zygote.spawn(f"{__name__}:attempt_worker", identity=INITECH, sock=theirs, args=(name, context))
            theirs.close()
            assert handle.id == spare.id, name
            reply = received(ours)
            ours.close()
            status = handle.wait(10)
            if killed:   # seccomp kills the process: no reply, SIGSYS credited to seccomp
                assert reply is None and (status.signal, status.layer) == (signal.SIGSYS, "seccomp"), (name, status)
            else:
                assert reply is not None and reply["blocked"] and status.code == 0, (name, reply, status)


def test_a_different_policy_never_takes_the_spare(zygote):
    stop(*start_echo(zygote))
    old = spare_of(zygote, INITECH)
    tighter = load_policy({"limits": {"pids": 17}})
    handle, sock = start_echo(zygote, policy=tighter)
    assert handle.id != old.id
    node = handle.cgroup.tenant_dirs
    assert open(os.path.join(node.get("pids", node.get("v2")), "pids.max")).read() == "17\n"   # the tenant's, now
    stop(handle, sock)
    new = spare_of(zygote, INITECH)
    assert new.policy == tighter and new.id != old.id
    assert not any(os.path.isdir(d) for d in old.cgroup.dirs.values())   # the stale spare is gone


def test_a_spare_that_dies_is_dropped_and_the_next_spawn_arms_afresh(zygote):
    stop(*start_echo(zygote))
    spare = spare_of(zygote, INITECH)
    spare.cgroup.kill()
    deadline = time.monotonic() + 10
    while spare in zygote.spares() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert spare not in zygote.spares()
    handle, sock = start_echo(zygote)
    assert handle.id != spare.id
    stop(handle, sock)


def test_close_removes_every_spare():
    z = Zygote.start(preload=("rtd.sandbox.echo",))
    try:
        stop(*start_echo(z))
        spare = spare_of(z, INITECH)
        pids = leaf_pids(spare)
    finally:
        z.close()
    assert z.spares() == []
    assert not any(os.path.isdir(d) for d in spare.cgroup.dirs.values())
    assert all(not os.path.exists(f"/proc/{p}") or proc_status(p)["State"].startswith("Z") for p in pids)


def test_spares_off_leaves_nothing_armed():
    z = Zygote.start(preload=("rtd.sandbox.echo",), spares=False)
    try:
        handle, sock = start_echo(z)
        assert {"cgroup", "namespaces", "fork", "mounts", "seccomp", "armed"} <= set(handle.startup_ms)   # all on the path
        stop(handle, sock)
        assert z.settle(1) and z.spares() == []
    finally:
        z.close()
