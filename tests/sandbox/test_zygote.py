"""The zygote for real: fork-server workers are confined (checked from the host side
through /proc), answer over their one socket, report exits, and are killed and cleaned up."""
import array
import mmap
import os
import signal
import socket

import pytest
from sandbox_workers import proc_status, received
from sandbox_workers import start_echo as start_echo_of

from rtd import wire
from rtd.errors import Code, RtdError
from rtd.sandbox import TenantIdentity, load_policy
from rtd.sandbox.zygote import Zygote

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="the zygote's workers need root"),
              pytest.mark.usefixtures("no_cgroup_leftovers")]
ACME = TenantIdentity("acme", 61000, 61000)


@pytest.fixture(scope="module")
def zygote():
    z = Zygote.start(preload=("rtd.sandbox.echo", __name__))
    yield z
    z.close()
    with pytest.raises(ChildProcessError):
        os.waitpid(z.pid, os.WNOHANG)   # reaped by close()


def start_echo(zygote, policy=None, identity=ACME):
    return start_echo_of(zygote, identity, policy, args=("hi",))


def test_worker_answers_and_exits_cleanly(zygote):
    handle, sock = start_echo(zygote)
    wire.send(sock, wire.Kind.ECHO, 7, {"x": [1, 2]})
    assert received(sock) == {"x": [1, 2]}
    assert handle.alive()
    sock.close()
    status = handle.wait(10)
    assert (status.code, status.signal, status.layer) == (0, None, None)
    assert not handle.alive()


def test_worker_confinement_seen_from_the_host(zygote):
    handle, sock = start_echo(zygote)
    st = proc_status(handle.pid)
    assert st["Seccomp"] == "2" and st["NoNewPrivs"] == "1"
    assert st["CapEff"] == st["CapBnd"] == "0" * 16
    assert st["Uid"].split() == ["61000"] * 4 and st["Gid"].split() == ["61000"] * 4
    assert st["NSpid"].split()[-1] == "1"
    assert len(os.listdir(f"/proc/{handle.pid}/fd")) == 1   # only the RPC socket
    for ns in ("mnt", "pid", "net", "ipc", "uts", "cgroup", "user"):
        assert os.readlink(f"/proc/{handle.pid}/ns/{ns}") != os.readlink(f"/proc/self/ns/{ns}"), ns
    assert all(v.startswith("enforced") for v in handle.layers.values()), handle.layers
    usage = handle.usage()
    assert usage["pids"] == 2 and usage["memory_bytes"] > 0 and usage["oom_kills"] == 0
    sock.close()
    handle.wait(10)


def test_kill_is_a_hard_kill_of_the_tree(zygote):
    handle, sock = start_echo(zygote)
    handle.kill()
    status = handle.wait(10)
    assert status.signal == signal.SIGKILL and status.layer is None and "supervisor" in status.reason
    assert received(sock) is None
    sock.close()


def test_strict_refusal_changes_nothing(zygote):
    ours, theirs = socket.socketpair()
    with pytest.raises(RtdError) as e:
        zygote.spawn("rtd.sandbox.echo:serve", policy=load_policy({"mandatory": ["gpu"], "limits": {"gpu_devices": [63], "gpu_memory_bytes": 1 << 20}}),
                     identity=ACME, sock=theirs)
    assert e.value.code is Code.E_LAYER_UNAVAILABLE
    handle, sock = start_echo(zygote)   # the zygote still serves
    sock.close()
    assert handle.wait(10).code == 0


def test_target_must_be_preloaded(zygote):
    ours, theirs = socket.socketpair()
    with pytest.raises(RtdError) as e:
        zygote.spawn("rtd.sandbox.nonexistent:serve", identity=ACME, sock=theirs)
    assert e.value.code is Code.E_CONTAINMENT and "not preloaded" in e.value.detail


def test_two_tenants_run_side_by_side(zygote):
    a, sa = start_echo(zygote)
    b, sb = start_echo(zygote, identity=TenantIdentity("globex", 61001, 61001))
    assert os.readlink(f"/proc/{a.pid}/ns/mnt") != os.readlink(f"/proc/{b.pid}/ns/mnt")
    assert proc_status(b.pid)["Uid"].split()[0] == "61001"
    for handle, sock in ((a, sa), (b, sb)):
        sock.close()
        assert handle.wait(10).code == 0


def memfd_worker(sock):
    """Inside the sandbox: map a memfd the supervisor passed, answer with a memfd of our own."""
    msg, fds, _, _ = socket.recv_fds(sock, 1024, 1)
    size = int(msg)
    with mmap.mmap(fds[0], size, prot=mmap.PROT_READ) as view:
        total = sum(view[:size])
    reply = os.memfd_create("rtd-reply", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(reply, 8)
    with mmap.mmap(reply, 8) as out:
        out[:] = array.array("q", [total]).tobytes()
    socket.send_fds(sock, [b"8"], [reply])


def test_memfds_cross_the_socket_both_ways(zygote):
    ours, theirs = socket.socketpair()
    handle = zygote.spawn(f"{__name__}:memfd_worker", identity=ACME, sock=theirs)
    theirs.close()
    data = bytes(range(256)) * 4096
    fd = os.memfd_create("rtd-request")
    os.write(fd, data)
    socket.send_fds(ours, [str(len(data)).encode()], [fd])
    os.close(fd)
    msg, fds, _, _ = socket.recv_fds(ours, 1024, 1)
    assert int.from_bytes(os.pread(fds[0], int(msg), 0), "little") == sum(data)
    os.close(fds[0])
    ours.close()
    status = handle.wait(10)
    assert (status.code, status.signal) == (0, None), status
