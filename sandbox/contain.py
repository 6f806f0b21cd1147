"""The ONE ordered list of confinement steps, parent side and child side together.

Launcher (zygote or run_confined caller, root, no threads): plan layers, refuse in strict
mode, create the cgroup, compile seccomp, fork the helper.
Helper: die with the launcher → join the cgroup → (switch to the tenant uid →) unshare
→ fork the worker (pid 1) → report its pid → wait for it → report its exit.
Worker: new session, death signal, close fds → hostname → mounts + pivot_root → rlimits →
GPU (a worker granted GPUs: CUDA initialised for its own devices, see below) → drop
bounding set, uid/gid, capabilities, no_new_privs → seccomp (last) → [armed: wait for the
job] → report ready → target(sock, *args).

CUDA does not survive fork, so each GPU worker initialises it itself: after its mounts (it
sees only its own device nodes and the driver's libraries, which the initialiser maps while
it may still open files) and before the privilege drop and seccomp (the filter's GPU
variant then only has to allow what CUDA does once running: see seccomp). The launcher
works out the grant (gpu.grant: a granted device the host lacks refuses the worker before
anything is created) and imports the initialiser before it forks.

A worker launched without its job is a spare: every step above runs ahead of time
(joining a cgroup alone waits for an RCU grace period), then the fully confined worker
waits for its job — a Kind.JOB frame: target name, args and its socket — on the go
socket, the one fd it holds from outside besides the report socket, answers on it with a
Kind.REPORT {"ready": true} and closes it before running the target.

Helper and worker report to the launcher as Kind.REPORT frames on one SOCK_SEQPACKET
socket (see `channel`); a step that fails reports which step and why, and nothing runs
unconfined. `Reports` reads them, turning a malformed one into the worker's refusal."""
import dataclasses
import errno
import logging
import os
import select
import signal
import socket
import sys
import time
from typing import Callable

from rtd.errors import Code, RtdError
from rtd.sandbox import channel, gpu, mountns, namespaces, privileges, rlimits, seccomp
from rtd.sandbox.cgroup import Layout, WorkerCgroup, detect_layout
from rtd.sandbox.channel import NUMBER, OPTIONAL_INT
from rtd.sandbox.host import plan_layers
from rtd.wire import Kind

log = logging.getLogger("rtd.sandbox")
EXIT_CONTAINMENT_FAILED = 70
REPORTS = ({"step": str, "t": NUMBER}, {"ready": bool, "t": NUMBER}, {"worker_pid": int},
           {"exit": {"code": OPTIONAL_INT, "signal": OPTIONAL_INT, "cpu_s": NUMBER}}, {"error": channel.ERROR})
JOB = {"target": str, "args": list}
READY = {"ready": True}   # a spare's word on the go socket: it has its job, is confined and runs it


@dataclasses.dataclass(frozen=True)
class ExitStatus:
    code: int | None
    signal: int | None
    layer: str | None   # "seccomp" | "memory" | "pids" | "cpu" | "gpu" | "rlimits" | None
    reason: str


@dataclasses.dataclass
class Spec:
    """What the helper needs for the tenant's confinement, prepared before the fork."""
    policy: object
    identity: object
    procs_files: list
    layers: dict
    bpf: seccomp.Filter | None
    grant: gpu.Grant | None = None    # what a worker granted GPUs gets (None: no device at all)
    gpu_init: Callable | None = None  # its initialiser, gpu.initializer(grant.init), imported before the fork


@dataclasses.dataclass
class Job:
    """What the worker runs: target(socket(sock_fd), *args)."""
    target: Callable
    args: tuple
    sock_fd: int


def prepare(policy, identity, instance: str, worker: str, layout: Layout | None = None,
            driver: gpu.Driver = gpu.DRIVER) -> tuple[WorkerCgroup, dict, seccomp.Filter | None, gpu.Grant | None]:
    """Launcher side: decide the layers, refuse or warn, work out the GPU grant (a GPU
    policy's nodes, libraries and initialiser must all be there), make the worker's leaf
    (below the tenant's node of this rtd instance), compile seccomp."""
    if os.geteuid() != 0:
        raise RtdError(Code.E_LAYER_UNAVAILABLE, "the launcher must run as root")
    grant = gpu.grant(policy.limits, driver, audit=policy.unsafe_gpu_audit)
    if grant is not None:
        gpu.initializer(grant.init)
    layout = layout or detect_layout()
    layers = plan_layers(policy, layout)
    missing = {k: v for k, v in layers.items() if not v.startswith(("enforced", "disabled by policy"))}
    required = [k for k in policy.mandatory if k in missing]
    if required and policy.strict:
        raise RtdError(Code.E_LAYER_UNAVAILABLE, f"{required[0]}: {missing[required[0]]}")
    for name, why in missing.items():
        log.warning("worker %s starts WITHOUT layer %s: %s", worker, name, why)
    cg = WorkerCgroup.create(layout, policy.cgroup_parent, instance, identity.name, worker, policy.limits)
    layers.update(cg.layers)
    return cg, layers, seccomp_program(layers, policy), grant


def seccomp_program(layers: dict, policy) -> seccomp.Filter | None:
    """The compiled filter when the seccomp layer is in force (off by policy or host: None):
    a GPU variant for a policy that grants GPUs, the audit one where it turns unsafe_gpu_audit on."""
    if not layers["seccomp"].startswith("enforced"):
        return None
    if not policy.limits.gpu_devices:
        return seccomp.compiled("cpu")
    return seccomp.compiled("gpu-audit" if policy.unsafe_gpu_audit else "gpu")


def launch(spec: Spec, job: Job | None = None, go: socket.socket | None = None,
           resolve: Callable | None = None) -> tuple[int, socket.socket]:
    """Fork the helper; returns (helper pid, the launcher's end of the report socket). With
    a job the helper goes straight on; otherwise it arms and waits for `send_job` on the go
    socket (the caller's copy may be closed after this), turning the job's target name into
    a function with `resolve` (in the helper, which has the launcher's modules)."""
    ours, theirs = channel.socketpair()
    pid = os.fork()
    if pid == 0:
        code = EXIT_CONTAINMENT_FAILED
        try:
            ours.close()
            code = _helper(spec, theirs, job, go, resolve)
        finally:
            os._exit(code)
    theirs.close()
    return pid, ours


def send_job(go: socket.socket, target: str, args: list, sock_fd: int):
    """Hand an armed spare its job; the worker's socket travels as the frame's fd."""
    channel.send(go, Kind.JOB, {"target": target, "args": list(args)}, [sock_fd])


def receive_ready(go: socket.socket) -> bool:
    """Launcher side, after `send_job`: True once the worker says it is confined and runs
    the job, False when it closed the go socket without a word (it died: its helper's
    reports say why); RtdError for anything else it sent."""
    try:
        head = channel.receive_head(go, Kind.REPORT, "ready word")
    except EOFError:
        return False
    if head != READY:
        raise channel.malformed("ready word", f"{head!r:.80}")
    return True


def _receive_job(go: socket.socket, resolve: Callable) -> Job | None:
    """The job from the launcher, or None when it gave up on this spare (EOF)."""
    try:
        frame = channel.receive(go, "job")
    except EOFError:
        return None
    if frame.kind is not Kind.JOB or len(frame.fds) != 1 or not channel.fits(frame.head, JOB):
        raise channel.malformed("job", "one JOB frame with a target, args and one socket expected")
    return Job(resolve(frame.head["target"]), tuple(frame.head["args"]), frame.fds[0])


def _report(sock: socket.socket, **msg):
    channel.send(sock, Kind.REPORT, msg)


def _mark(sock: socket.socket, step: str) -> str:
    """Tell the launcher a step starts (CLOCK_MONOTONIC, comparable across processes)."""
    _report(sock, step=step, t=time.perf_counter())
    return step


def _failed(sock: socket.socket, step: str, e: BaseException, limits=None):
    """Report the failed step; a refusal with a code of its own (the GPU initialiser's) keeps it,
    and a fork the kernel refused with EAGAIN is the pids limit's doing, named with its value."""
    if step == "fork" and isinstance(e, OSError) and e.errno == errno.EAGAIN and limits is not None:
        error = RtdError(Code.E_RESOURCE_EXHAUSTED, f"pids: a new worker's fork was refused at the policy's limits.pids "
                                                    f"{limits.pids} (the tenant's workers and their threads together)")
    elif isinstance(e, RtdError):
        error = RtdError(e.code, f"{step}: {e.detail}")
    else:
        error = RtdError(Code.E_CONTAINMENT, f"{step}: {e}")
    try:
        _report(sock, error=channel.error_head(error))
    except (OSError, RtdError):
        pass


def _helper(spec: Spec, report: socket.socket, job: Job | None, go: socket.socket | None, resolve) -> int:
    step = "helper"
    try:
        _mark(report, "helper")
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        privileges.keep_only_fds({report.fileno(), job.sock_fd if job else go.fileno()})
        privileges.die_with_parent()
        step = _mark(report, "cgroup")
        for path in spec.procs_files:
            with open(path, "w") as f:
                f.write(str(os.getpid()))
        step = _mark(report, "namespaces")
        with_userns = spec.layers["userns"].startswith("enforced")
        namespaces.enter(spec.identity.uid, spec.identity.gid, with_userns)
        privileges.die_with_parent()   # a uid change clears the parent-death signal
        step = _mark(report, "fork")
        pid = os.fork()
        if pid == 0:
            _worker(spec, job, go, resolve, report, with_userns)
        os.close(job.sock_fd if job else go.fileno())   # the worker's alone: its death is the supervisor's EOF
        _report(report, worker_pid=pid)
        _, status, usage = os.wait4(pid, 0)
        _report(report, exit={"code": os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else None,
                              "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                              "cpu_s": usage.ru_utime + usage.ru_stime})
        return 0
    except BaseException as e:
        _failed(report, step, e, spec.policy.limits)
        return EXIT_CONTAINMENT_FAILED


def _worker(spec: Spec, job: Job | None, go: socket.socket | None, resolve, report: socket.socket, with_userns: bool):
    code, step, ready = EXIT_CONTAINMENT_FAILED, "session", False
    try:
        _mark(report, "session")
        privileges.new_session()
        privileges.die_with_parent()
        privileges.keep_only_fds({report.fileno(), job.sock_fd if job else go.fileno()})
        sys.stdin = sys.stdout = sys.stderr = None   # fds 0-2 are closed: print() must not hit a reused fd
        step = _mark(report, "hostname")
        namespaces.set_hostname()
        step = _mark(report, "mounts")
        mountns.build_root(spec.policy.ro_binds, spec.policy.limits.scratch_bytes,
                           spec.identity.uid, spec.identity.gid, spec.grant)
        step = _mark(report, "rlimits")
        rlimits.apply(spec.policy.limits)
        if spec.grant is not None:
            step = _mark(report, "gpu")
            spec.gpu_init(spec.grant.ordinals, spec.grant.memory_bytes)
        step = _mark(report, "privileges")
        privileges.drop(spec.identity.uid, spec.identity.gid, with_userns)
        privileges.die_with_parent()   # re-armed: the uid switch cleared it
        step = _mark(report, "seccomp")
        if spec.bpf is not None:
            seccomp.install(spec.bpf)
        if job is None:
            step = _mark(report, "armed")
            job = _receive_job(go, resolve)
            if job is None:   # the launcher gave up on this spare
                code = 0
                return
        sock = socket.socket(fileno=job.sock_fd)
        _report(report, ready=True, t=time.perf_counter())
        if go is not None:
            channel.send(go, Kind.REPORT, READY)   # straight to the supervisor waiting in spawn(), no hop through the zygote
            go.close()
        report.close()
        ready = True
        job.target(sock, *job.args)
        code = 0
    except BaseException as e:
        if not ready:
            _failed(report, step, e)
        else:
            code = 1
    finally:
        os._exit(code)


class Reports:
    """Launcher-side reader of the helper's and worker's report socket. A malformed report
    ends the reading and stands as the worker's error (E_CONTAINMENT): the launcher
    refuses the worker, it never fails itself."""

    def __init__(self, sock: socket.socket):
        self.sock, self.eof = sock, False
        self.worker_pid, self.exit, self.error, self.ready = None, None, None, False
        self.steps: dict[str, float] = {}   # step -> when it started; "ready" when confined

    def pump(self, timeout: float | None) -> bool:
        """Read what is available (waiting up to `timeout`); False when nothing came."""
        if self.eof:
            return False
        if not select.select([self.sock], [], [], timeout)[0]:
            return False
        try:
            self._take(channel.receive_head(self.sock, Kind.REPORT, "confinement report"))
        except EOFError:
            self.close()
        except RtdError as e:
            self.error = channel.error_head(e)
            self.close()
        return True

    def _take(self, head: dict):
        if not any(channel.fits(head, shape) for shape in REPORTS) or head.get("ready", True) is not True:
            raise channel.malformed("confinement report", f"{head!r:.80}")
        if "error" in head:   # a known code, or malformed; its detail bounded as every RtdError's
            self.error = channel.error_head(channel.error_of(head["error"], "confinement report"))
        self.worker_pid = head.get("worker_pid", self.worker_pid)
        self.exit = head.get("exit", self.exit)
        self.ready = self.ready or "ready" in head
        if "t" in head:
            self.steps["ready" if "ready" in head else head["step"]] = head["t"]

    def expect_ready(self, timeout: float) -> int:
        """Wait until the worker is confined; returns its host pid or raises the failed step."""
        deadline = time.monotonic() + timeout
        while not ((self.ready and self.worker_pid) or self.error or self.eof):   # the pid may come second
            left = deadline - time.monotonic()
            if left <= 0:
                raise RtdError(Code.E_CONTAINMENT, f"worker not confined within {timeout} s")
            self.pump(left)
        if self.error:
            raise channel.error_of(self.error, "confinement report")
        if not self.ready:
            raise RtdError(Code.E_CONTAINMENT, "worker died during confinement")
        return self.worker_pid

    def drain(self, timeout: float):
        deadline = time.monotonic() + timeout
        while not self.eof and self.pump(max(0.0, deadline - time.monotonic())):
            pass
        self.close()

    def close(self):
        if not self.eof:
            self.sock.close()
            self.eof = True


def ended(helper_status: int | None, reports: Reports) -> tuple[int | None, int | None, float]:
    """(exit code, signal, CPU seconds) of the worker: as its helper reported it, else the helper's own end."""
    if reports.exit is not None:
        return reports.exit["code"], reports.exit["signal"], reports.exit["cpu_s"]
    if helper_status is not None and os.WIFSIGNALED(helper_status):
        return None, os.WTERMSIG(helper_status), 0.0
    return (os.waitstatus_to_exitcode(helper_status) if helper_status is not None else None), None, 0.0


def exit_status(code: int | None, sig: int | None, cpu_s: float, oom_kills: int, killed: bool,
                cpu_seconds: int) -> ExitStatus:
    """Name what ended the worker: the kernel's OOM counter, the exit signal, our own kill,
    the CPU rlimit (pid 1 of a namespace ignores SIGXCPU, so the kernel's SIGKILL ends it)."""
    if sig is None:
        return ExitStatus(code, None, None, "exited" if code == 0 else f"exited with code {code}")
    if sig == signal.SIGSYS:
        return ExitStatus(None, sig, "seccomp", "SIGSYS: a forbidden system call")
    if sig == signal.SIGKILL and oom_kills:
        return ExitStatus(None, sig, "memory", f"out of memory: cgroup memory limit (oom_kill={oom_kills})")
    if sig == signal.SIGKILL and killed:
        return ExitStatus(None, sig, None, "killed by the supervisor")
    if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_seconds and cpu_s >= cpu_seconds):
        return ExitStatus(None, sig, "cpu", "CPU time limit (RLIMIT_CPU)")
    if sig == signal.SIGXFSZ:
        return ExitStatus(None, sig, "rlimits", "file size limit (RLIMIT_FSIZE)")
    return ExitStatus(None, sig, None, f"killed by {signal.Signals(sig).name}")


def step_durations(launched: float, steps: dict[str, float]) -> dict[str, float]:
    """Milliseconds each step took, from `launched` (the request to fork, or the job handed
    to an armed spare) to "ready"; steps a spare did ahead of time are not counted."""
    marks = sorted([("launch", launched)] + [kv for kv in steps.items() if kv[1] >= launched], key=lambda kv: kv[1])
    return {name: round((nxt - t) * 1000, 3) for (name, t), (_, nxt) in zip(marks, marks[1:])}


def reap(pid: int, timeout: float) -> int | None:
    """waitpid with a deadline; None if the child is still running."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            got, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return None
        if got:
            return status
        if time.monotonic() > deadline:
            return None
        time.sleep(0.001)

