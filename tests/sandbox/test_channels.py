"""Every supervisor↔child channel of the sandbox speaks rtd.wire frames: the confinement
reports, a spare's job and ready word, the fork server's requests and reports, and
run_confined's result. What a peer sends malformed is an RtdError for the reader, never a
traceback: checked with real confined processes and real peers that write garbage."""
import contextlib
import ctypes
import itertools
import os
import socket
import stat
import threading

import numpy as np
import pytest
from sandbox_workers import received

from rtd import wire
from rtd.errors import Code, RtdError
from rtd.sandbox import TenantIdentity, load_policy, run_confined
from rtd.sandbox import channel, contain, forkserver
from rtd.sandbox.zygote import Zygote
from rtd.wire import Kind

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="confined workers need root"),
              pytest.mark.usefixtures("no_cgroup_leftovers")]
CHANNELS = TenantIdentity("channels", 61020, 61020)
INSTANCE = f"rc{os.getpid()}"
_leaves = itertools.count(700)   # leaf names the leftovers fixture checks, apart from run_confined's


def say_hello(sock, *args):
    wire.send(sock, Kind.OK, 0, {"hello": list(args)})


@contextlib.contextmanager
def launched(job=None, go=None):
    """A helper and worker of the default policy, as run_confined and the fork server launch
    them: (helper pid, its Reports). Killed and removed afterwards."""
    policy = load_policy()
    cg, layers, bpf, _ = contain.prepare(policy, CHANNELS, INSTANCE, f"{INSTANCE}-{next(_leaves)}")
    helper, reports = None, None
    try:
        spec = contain.Spec(policy, CHANNELS, cg.procs_files, layers, bpf)
        helper, report_sock = contain.launch(spec, job, go, resolve={"hello": say_hello}.__getitem__)
        reports = contain.Reports(report_sock)
        yield helper, reports
    finally:
        cg.kill()
        if helper is not None:
            contain.reap(helper, 5.0)
        if reports is not None:
            reports.close()
        cg.remove()


def record(kind, head, tensors=None) -> bytes:
    return b"".join(bytes(p) for p in wire.encode(kind, 0, head, tensors).parts)


def test_confinement_reports_are_report_frames_in_step_order():
    ours, theirs = socket.socketpair()
    with launched(contain.Job(say_hello, ("hi",), theirs.fileno())) as (helper, reports):
        theirs.close()
        frames = []
        while True:
            try:
                frames.append(channel.receive(reports.sock, "test"))
            except EOFError:
                break
        assert received(ours) == {"hello": ["hi"]}
    assert {f.kind for f in frames} == {Kind.REPORT} and not any(f.fds or f.tensors for f in frames)
    steps = [f.head["step"] for f in frames if "step" in f.head]
    assert steps == ["helper", "cgroup", "namespaces", "fork", "session", "hostname", "mounts", "rlimits", "privileges",
                     "seccomp"]
    times = [f.head["t"] for f in frames if "t" in f.head]
    assert times == sorted(times)
    assert any(f.head.get("ready") is True for f in frames) and any("worker_pid" in f.head for f in frames)
    assert frames[-1].head == {"exit": {"code": 0, "signal": None, "cpu_s": frames[-1].head["exit"]["cpu_s"]}}


BAD_REPORTS = {
    "not a frame": b"\0" * 64,
    "a head beyond the channel's bound": wire.HEADER.pack(wire.MAGIC, wire.VERSION, Kind.REPORT, 0, 0, 2 << 20, 0),
    "a frame of another kind": record(Kind.JOB, {"step": "mounts", "t": 1.0}),
    "an unknown report": record(Kind.REPORT, {"stpe": "mounts", "t": 1.0}),
    "a pid that is not an int": record(Kind.REPORT, {"worker_pid": "1"}),
    "a ready that is false": record(Kind.REPORT, {"ready": False, "t": 1.0}),
    "an error with an unknown code": record(Kind.REPORT, {"error": {"code": "E_NOPE", "detail": "x"}}),
    "a tensor": record(Kind.REPORT, {"step": "mounts", "t": 1.0}, {"x": np.zeros(2)}),
}


@pytest.mark.parametrize("bad", sorted(BAD_REPORTS) + ["an fd"])
def test_a_malformed_report_refuses_the_worker_and_the_reader_stays_up(bad):
    ours, theirs = channel.socketpair()
    reports = contain.Reports(ours)
    channel.send(theirs, Kind.REPORT, {"step": "helper", "t": 1.0})
    if bad == "an fd":
        channel.send(theirs, Kind.REPORT, {"step": "cgroup", "t": 2.0}, [theirs.fileno()])
    else:
        theirs.send(BAD_REPORTS[bad])
    with pytest.raises(RtdError) as e:
        reports.expect_ready(5)
    assert e.value.code is Code.E_CONTAINMENT and e.value.detail.startswith("malformed confinement report"), e.value
    assert reports.steps == {"helper": 1.0} and reports.eof   # what came before counts; nothing after is read
    theirs.close()


def test_a_spare_takes_its_job_frame_and_answers_ready_on_the_go_socket():
    go, go_theirs = channel.socketpair()
    with launched(go=go_theirs) as (helper, reports):
        go_theirs.close()
        while "armed" not in reports.steps:
            assert reports.pump(10) and not reports.error, reports.error
        ours, theirs = socket.socketpair()
        contain.send_job(go, "hello", ["hi"], theirs.fileno())
        theirs.close()
        assert contain.receive_ready(go)
        assert reports.expect_ready(10) == reports.worker_pid
        assert received(ours) == {"hello": ["hi"]}


@pytest.mark.parametrize("bad", ["not a frame", "no socket", "a frame of another kind", "args that are not a list"])
def test_a_spare_refuses_a_malformed_job(bad):
    go, go_theirs = channel.socketpair()
    with launched(go=go_theirs) as (helper, reports), socket.socket() as sock:
        go_theirs.close()
        if bad == "not a frame":
            go.send(b"run something")
        elif bad == "no socket":
            channel.send(go, Kind.JOB, {"target": "hello", "args": []})
        elif bad == "a frame of another kind":
            channel.send(go, Kind.REPORT, {"target": "hello", "args": []}, [sock.fileno()])
        else:
            channel.send(go, Kind.JOB, {"target": "hello", "args": "hi"}, [sock.fileno()])
        with pytest.raises(RtdError) as e:
            reports.expect_ready(10)
        assert e.value.code is Code.E_CONTAINMENT and e.value.detail.startswith("armed: "), e.value
        assert "malformed job" in e.value.detail
        assert not contain.receive_ready(go)   # the worker closed the go socket without a word


BAD_REQUESTS = {   # what the fork server is sent -> the id its "failed" answer carries
    "not a frame": (b"arm, please", None),
    "two frames in one record": (2 * record(Kind.ZYGOTE, {"op": "arm"}), None),
    "an arm request without a go socket": (record(Kind.ZYGOTE, {"op": "arm", "id": "x", "policy": {}, "identity": [],
                                                                "procs": [], "layers": {}}), "x"),
    "an unknown op": (record(Kind.ZYGOTE, {"op": "fork", "id": "x"}), "x"),
}


def test_the_fork_server_answers_malformed_requests_and_serves_on():
    pid, ours = forkserver.start(())
    assert channel.receive_head(ours, Kind.ZYGOTE, "test")["op"] == "ready"
    for bad, (data, wid) in BAD_REQUESTS.items():
        ours.send(data)
        failed = channel.receive_head(ours, Kind.ZYGOTE, "test")
        assert failed["op"] == "failed" and failed["error"]["code"] == Code.E_CONTAINMENT.name, bad
        assert failed["error"]["detail"].startswith("malformed zygote request"), (bad, failed)
        assert failed["id"] == wid, bad
    ours.close()   # the supervisor is gone: the fork server ends
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def test_a_malformed_zygote_report_fails_the_request_not_the_supervisor(monkeypatch, caplog):
    crashed = []
    monkeypatch.setattr(threading, "excepthook", crashed.append)
    ours, theirs = channel.socketpair()
    pid = os.fork()
    if pid == 0:   # a fork server that answers with garbage, then waits for its end
        try:
            ours.close()
            theirs.send(b"\0" * wire.HEADER.size)
            theirs.recv(1)
        finally:
            os._exit(0)
    theirs.close()
    zygote = Zygote(pid, ours, spares=False)
    try:
        with pytest.raises(RtdError) as e, socket.socket() as sock:
            zygote.spawn("rtd.sandbox.echo:serve", identity=CHANNELS, sock=sock)
        assert e.value.code is Code.E_CONTAINMENT
    finally:
        zygote.close()
    assert "malformed zygote report: bad magic or version" in caplog.text
    assert os.path.exists(f"/proc/{pid}") is False   # the out-of-step fork server was ended and reaped
    assert crashed == []


def forge_result(kind: int, head: dict):
    """Inside the confined child: write a frame of its own making on the result socket, the one
    stream socket it holds (its report channel is SOCK_SEQPACKET). The fd keeps the number it had
    in the parent, which in a long test session is past the child's RLIMIT_NOFILE (64), so the
    search runs over every number an fd can have here, not over SC_OPEN_MAX."""
    fd = next(fd for fd in range(1 << 16) if _is_stream_socket(fd))
    os.write(fd, record(Kind(kind), head))
    os._exit(0)


def _is_stream_socket(fd: int) -> bool:
    try:
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            return False
    except OSError:
        return False
    sock = socket.socket(fileno=fd)
    try:
        return sock.type == socket.SOCK_STREAM
    finally:
        sock.detach()


@pytest.mark.parametrize("kind, head", [
    (Kind.RESULT, {"ok": "yes", "result": 1}),
    (Kind.RESULT, {"ok": True}),
    (Kind.RESULT, {"ok": False, "rtd": "E_NOPE", "detail": "x"}),
    (Kind.OK, {"ok": True, "result": 1}),
])
def test_a_forged_result_is_a_protocol_error(kind, head):
    with pytest.raises(RtdError) as e:
        run_confined(forge_result, int(kind), head)
    assert e.value.code is Code.E_WORKER_PROTOCOL, e.value


def test_a_result_beyond_the_head_bound_is_refused_as_data():
    with pytest.raises(RtdError) as e:
        run_confined(lambda: "x" * (wire.MAX_HEAD + 1))
    assert e.value.code is Code.E_REQUEST_INVALID and "bounds" in e.value.detail


def heap_growth(sock):
    """Inside a worker: whether one 64 MiB buffer came from the heap (not a fresh mapping)."""
    buffer = bytearray(64 << 20)
    address = ctypes.addressof(ctypes.c_char.from_buffer(buffer))
    with open("/proc/self/maps") as f:
        spans = [line.split()[0].split("-") for line in f if line.rstrip().endswith("[heap]")]
    on_heap = any(int(start, 16) <= address < int(end, 16) for start, end in spans)
    wire.send(sock, Kind.OK, 0, {"on_heap": on_heap, "held": len(buffer)})


def test_the_fork_server_keeps_large_buffers_warm_for_its_workers():
    """The fork server sets glibc's M_MMAP_MAX to 0 before it forks (the supervisor no longer
    does): a worker's 64 MiB buffer comes from the heap, not from a fresh mapping."""
    zygote = Zygote.start(preload=(__name__,), spares=False)
    try:
        ours, theirs = socket.socketpair()
        policy = load_policy({"unsafe_disable_seccomp": True})   # reading /proc/self/maps needs open()
        handle = zygote.spawn(f"{__name__}:heap_growth", policy=policy, identity=CHANNELS, sock=theirs)
        theirs.close()
        assert received(ours)["on_heap"]   # without it: a fresh mmap outside the heap
        ours.close()
        assert handle.wait(10).code == 0
    finally:
        zygote.close()
