"""The escape battery as data: each attempt is a function run *inside* a confined worker
that tries one escape and reports whether the kernel refused it, plus the layers expected
to stop it, in order. Used by tests/security/test_escapes.py and `rtctl doctor`.

The layer credited is the one observed, never the one expected: a worker killed by a layer
is credited from the kill (SIGSYS: seccomp, SIGXFSZ: rlimits, the cgroup's OOM count:
memory); a refusal from the errno of the call that got it (OBSERVED; seccomp's own errno
rules answer EPERM to open and executable memory, which the kernel does not, so they can be
told apart). A refusal OBSERVED does not explain is credited to no layer, and the tests
then fail on it. An attempt returns {"blocked": bool, "how": str, "layer": str | None}; a
worker that vanished without a kill escaped."""
import contextlib
import ctypes
import dataclasses
import errno
import json
import mmap
import os
import socket
import tempfile
import time

import numpy
import pyseccomp as sc

from rtd.errors import Code, RtdError
from rtd.sandbox import seccomp
from rtd.sandbox.confined import ConfinedError, SandboxKilled, run_confined
from rtd.sandbox.syscalls import libc

CLONE_NEWUSER, SIGCHLD = 0x10000000, 17


class Refused(OSError):
    """An errno from one named call of an attempt."""

    def __init__(self, call: str, err: int):
        super().__init__(err, os.strerror(err))
        self.call = call


def _call(call: str, fn, *args):
    """fn(*args), its OSError named after `call` (what the errno is read against)."""
    try:
        return fn(*args)
    except Refused:
        raise
    except OSError as e:
        raise Refused(call, e.errno) from None


def _sys(name: str, *args) -> int:
    """A raw system call by name, numbered for this machine's architecture by libseccomp."""
    nr = sc.resolve_syscall(sc.Arch.NATIVE, name)
    result = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    if result < 0:
        raise Refused(name, ctypes.get_errno())
    return result


# The layer an errno comes from, for the call that got it in a worker: what `rtctl doctor`
# credits. A kill is read from its signal (SIGSYS: seccomp, SIGXFSZ: rlimits) or the cgroup's
# OOM count instead. Pairs not listed say nothing certain and are credited to no layer.
_CAPABILITY_CALLS = ("setns", "mount", "chroot", "bpf", "socket", "open_by_handle_at", "reboot", "setuid")
OBSERVED = {
    **{(call, seccomp.REFUSED): "seccomp" for call in ("open", "mmap", "mprotect")},   # the filter's errno rules
    **{(call, errno.EPERM): "privileges" for call in _CAPABILITY_CALLS},   # no capability (never seccomp: it kills these)
    ("open", errno.EACCES): "privileges",                # file modes against the worker's own uid
    ("open", errno.ENOENT): "mounts", ("open", errno.EROFS): "mounts", ("open", errno.ENOTDIR): "mounts",
    ("execve", errno.ENOENT): "mounts", ("execve", errno.EACCES): "mounts",   # read-only, noexec root
    ("connect", errno.ENOENT): "mounts",                 # the socket's path is not in the worker's root
    ("connect", errno.ENETUNREACH): "namespaces", ("connect", errno.EADDRNOTAVAIL): "namespaces",
    ("connect", errno.ECONNREFUSED): "namespaces",       # no interfaces; abstract sockets are per network namespace
    ("kill", errno.ESRCH): "namespaces", ("ptrace", errno.ESRCH): "namespaces",   # the supervisor is not in its pid namespace
    ("setuid", errno.EINVAL): "namespaces",              # uid 0 has no mapping in its user namespace
    ("fork", errno.EAGAIN): "pids",                      # pids.max (RLIMIT_NPROC, at the same count, answers alike)
    ("write", errno.EFBIG): "rlimits", ("write", errno.ENOSPC): "mounts",
}


def _refused(action) -> dict:
    """Run `action`; blocked if a call of it was refused with an errno, credited as OBSERVED says."""
    try:
        action()
    except Refused as e:
        name = errno.errorcode.get(e.errno, str(e.errno))
        return {"blocked": True, "how": f"{name} from {e.call}", "layer": OBSERVED.get((e.call, e.errno))}
    return {"blocked": False, "how": "the call succeeded"}


def _open(path: str, flags=os.O_RDONLY):
    return lambda: os.close(_call("open", os.open, path, flags, 0o600))


def _connect(family: int, address) -> dict:
    def go():
        with _call("socket", socket.socket, family, socket.SOCK_STREAM) as s:
            s.settimeout(2)
            _call("connect", s.connect, address)
    return _refused(go)


def _clone_newuser():
    pid = _sys("clone", CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0)
    if pid == 0:
        os._exit(0)


def _fork_bomb(ctx) -> dict:
    children = 0
    try:
        while children < 10 * ctx["pids"]:
            if os.fork() == 0:
                time.sleep(60)
                os._exit(0)
            children += 1
    except OSError as e:
        return {"blocked": children < ctx["pids"], "how": f"{errno.errorcode[e.errno]} from fork after {children} forks",
                "layer": OBSERVED.get(("fork", e.errno))}
    return {"blocked": False, "how": f"{children} forks succeeded"}


def _memory_bomb(ctx) -> dict:
    data = numpy.ones(2 * ctx["memory_bytes"] // 8)
    return {"blocked": False, "how": f"allocated and touched {data.nbytes} bytes"}


def _fill_file(ctx) -> dict:
    """Write far past the file-size limit into a memfd: the one file a worker can create (its
    seccomp filter refuses open), so the limit itself is what must stop it (SIGXFSZ, or EFBIG
    where the signal is ignored)."""
    written, chunk = 0, b"x" * (1 << 20)
    fd = os.memfd_create("rtd-fill", os.MFD_CLOEXEC)
    try:
        while written <= 4 * ctx["fsize_bytes"]:
            written += os.write(fd, chunk)
    except OSError as e:
        return {"blocked": written <= ctx["fsize_bytes"], "layer": OBSERVED.get(("write", e.errno)),
                "how": f"{errno.errorcode[e.errno]} from write after {written} bytes"}
    finally:
        os.close(fd)
    return {"blocked": False, "how": f"wrote {written} bytes"}


def _tiocsti(_ctx) -> dict:
    for fd in (0, 1, 2):
        if libc.ioctl(fd, 0x5412, ctypes.c_char_p(b"x")) == 0:   # TIOCSTI: push a byte into a terminal
            return {"blocked": False, "how": f"TIOCSTI on fd {fd} succeeded"}
    return _refused(_open("/dev/tty", os.O_RDWR))


def _mprotect_exec() -> None:
    page = mmap.mmap(-1, mmap.PAGESIZE)
    address = ctypes.addressof(ctypes.c_char.from_buffer(page))
    if libc.mprotect(ctypes.c_void_p(address), mmap.PAGESIZE, mmap.PROT_READ | mmap.PROT_EXEC) != 0:
        raise Refused("mprotect", ctypes.get_errno())


def _open_by_handle():
    handle = ctypes.create_string_buffer(8 + 128)
    ctypes.c_uint32.from_buffer(handle).value = 128
    os.close(_sys("open_by_handle_at", -100, handle, os.O_RDONLY))


@dataclasses.dataclass(frozen=True)
class Attempt:
    name: str
    stops: tuple[str, ...]      # layers expected to stop it, in order
    run: object                 # run(context) -> {"blocked": bool, "how": str}
    limits: tuple = ()          # (limit, value) pairs over the policy's: the same layer, met sooner


ATTEMPTS = [Attempt(*a) for a in [
    ("ptrace_supervisor", ("seccomp", "namespaces"), lambda c: _refused(lambda: _sys("ptrace", 16, c["supervisor_pid"], 0, 0))),
    ("kill_supervisor", ("seccomp", "namespaces"), lambda c: _refused(lambda: _call("kill", os.kill, c["supervisor_pid"], 0))),
    ("unshare_userns", ("seccomp",), lambda c: _refused(lambda: _sys("unshare", CLONE_NEWUSER))),
    ("clone_newuser", ("seccomp",), lambda c: _refused(_clone_newuser)),
    ("setns_mount", ("seccomp", "privileges"), lambda c: _refused(
        lambda: _sys("setns", _call("open", os.open, "/proc/self/ns/mnt", os.O_RDONLY), 0))),
    ("mount_tmpfs", ("seccomp", "privileges"), lambda c: _refused(
        lambda: _sys("mount", b"none", b"/scratch", b"tmpfs", 0, 0))),
    ("chroot", ("seccomp", "privileges"), lambda c: _refused(lambda: _call("chroot", os.chroot, "/scratch"))),
    ("setuid_root", ("seccomp", "namespaces"), lambda c: _refused(lambda: _call("setuid", os.setuid, 0))),
    ("keyctl_add_key", ("seccomp",), lambda c: _refused(
        lambda: _sys("add_key", b"user", b"rtd-escape", b"x", 1, -2))),
    ("bpf_map_create", ("seccomp", "privileges"), lambda c: _refused(
        lambda: _sys("bpf", 0, (ctypes.c_uint32 * 5)(2, 4, 8, 1, 0), 20))),
    ("perf_event_open", ("seccomp",), lambda c: _refused(
        lambda: _sys("perf_event_open", (ctypes.c_uint32 * 32)(1, 128), 0, -1, -1, 0))),
    ("userfaultfd", ("seccomp",), lambda c: _refused(lambda: os.close(_sys("userfaultfd", 1)))),
    ("io_uring_setup", ("seccomp",), lambda c: _refused(
        lambda: os.close(_sys("io_uring_setup", 4, (ctypes.c_uint32 * 30)())))),
    ("personality_exec", ("seccomp",), lambda c: _refused(lambda: _sys("personality", 0x0400000))),
    ("socket_inet", ("seccomp", "namespaces"), lambda c: _connect(socket.AF_INET, ("1.1.1.1", 53))),
    ("socket_inet6", ("seccomp", "namespaces"), lambda c: _connect(socket.AF_INET6, ("2606:4700:4700::1111", 53))),
    ("socket_netlink", ("seccomp",), lambda c: _refused(
        lambda: _call("socket", socket.socket, socket.AF_NETLINK, socket.SOCK_RAW, 0).close())),
    ("socket_packet", ("seccomp", "privileges"), lambda c: _refused(
        lambda: _call("socket", socket.socket, socket.AF_PACKET, socket.SOCK_RAW, 0).close())),
    ("connect_abstract_socket", ("seccomp", "namespaces"), lambda c: _connect(socket.AF_UNIX, "\0" + c["abstract_name"])),
    ("connect_fs_socket", ("seccomp", "mounts"), lambda c: _connect(socket.AF_UNIX, c["socket_path"])),
    ("read_etc_shadow", ("seccomp", "mounts"), lambda c: _refused(_open("/etc/shadow"))),
    ("proc_1_root", ("seccomp", "mounts"), lambda c: _refused(_open("/proc/1/root/etc/shadow"))),
    ("other_tenant_scratch", ("seccomp", "mounts"), lambda c: _refused(_open(c["other_scratch_file"]))),
    ("write_outside_scratch", ("seccomp", "mounts"), lambda c: _refused(
        _open("/usr/rtd-escape", os.O_WRONLY | os.O_CREAT))),
    ("write_cgroupfs", ("seccomp", "mounts"), lambda c: _refused(
        _open("/sys/fs/cgroup/cgroup.procs", os.O_WRONLY))),
    ("open_dev_mem", ("seccomp", "mounts"), lambda c: _refused(_open("/dev/mem"))),
    ("fill_file", ("rlimits",), _fill_file),   # tmpfs size= of /scratch is tested apart
    ("execve_shell", ("seccomp", "mounts"), lambda c: _refused(
        lambda: _call("execve", os.execv, "/usr/bin/sh", ["sh", "-c", "exit 0"]))),
    ("mmap_prot_exec", ("seccomp",), lambda c: _refused(
        lambda: _call("mmap", lambda: mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_EXEC)).close())),
    ("mprotect_exec", ("seccomp",), lambda c: _refused(_mprotect_exec)),
    ("fork_bomb", ("seccomp", "pids"), _fork_bomb),
    # the memory layer holds at any size: met at 128 MiB, the bomb is stopped in a fraction of
    # the time it takes to fill the production policy's 1 GiB (doctor and the tests alike)
    ("memory_bomb", ("memory",), _memory_bomb, (("memory_bytes", 128 << 20),)),
    ("tiocsti", ("seccomp", "mounts"), _tiocsti),
    ("open_by_handle_at", ("seccomp", "privileges"), lambda c: _refused(_open_by_handle)),
    ("reboot", ("seccomp", "privileges"), lambda c: _refused(
        lambda: _sys("reboot", 0xFEE1DEAD, 672274793, 0, 0))),   # CAD_OFF: harmless even if allowed
    ("init_module", ("seccomp",), lambda c: _refused(lambda: _sys("init_module", b"\0" * 64, 64, b""))),
]]
BY_NAME = {a.name: a for a in ATTEMPTS}


@dataclasses.dataclass(frozen=True)
class Result:
    name: str
    blocked: bool
    layer: str | None
    how: str


def _attempt_in_worker(name: str, context: dict) -> dict:
    return BY_NAME[name].run(context)


@contextlib.contextmanager
def targets(policy):
    """What the battery aims at: this (supervisor) process, a listening abstract and a
    filesystem socket, and another tenant's scratch file. Removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="rtd-escape-") as tmp, \
            socket.socket(socket.AF_UNIX) as abstract, socket.socket(socket.AF_UNIX) as fs_sock:
        os.chmod(tmp, 0o755)
        name = f"rtd-escape-{os.getpid()}"
        abstract.bind("\0" + name)
        abstract.listen()
        fs_sock.bind(os.path.join(tmp, "sup.sock"))
        os.chmod(os.path.join(tmp, "sup.sock"), 0o777)
        fs_sock.listen()
        other = os.path.join(tmp, "other-tenant-scratch")
        with open(other, "w") as f:
            f.write("secret")
        os.chmod(other, 0o644)
        yield {"supervisor_pid": os.getpid(), "abstract_name": name, "socket_path": os.path.join(tmp, "sup.sock"),
               "other_scratch_file": other, "memory_bytes": policy.limits.memory_bytes,
               "fsize_bytes": policy.limits.fsize_bytes, "pids": policy.limits.pids}


def run_attempt(attempt: Attempt, context: dict, policy) -> Result:
    """Run one attempt in a fresh confined worker under `policy` (with the attempt's own
    limits over it) and say who stopped it."""
    if attempt.limits:
        policy = dataclasses.replace(policy, limits=dataclasses.replace(policy.limits, **dict(attempt.limits)))
        context = {**context, **dict(attempt.limits)}
    try:
        out = run_confined(_attempt_in_worker, attempt.name, context, policy=policy, timeout=60)
    except SandboxKilled as e:
        return Result(attempt.name, e.layer is not None, e.layer, e.reason)
    except ConfinedError as e:
        return Result(attempt.name, False, None, f"attempt crashed: {e}")
    except RtdError as e:
        if e.code in (Code.E_CONTAINMENT, Code.E_LAYER_UNAVAILABLE):
            raise
        return Result(attempt.name, False, None, str(e))
    return Result(attempt.name, out["blocked"], out.get("layer") if out["blocked"] else None, out["how"])


def run_battery(policy, names=None, runners: int = 1) -> list[Result]:
    """Every attempt (or those named), in order. With `runners` > 1 they are shared out among
    that many forked runners, each confining its own workers (the caller must have no threads);
    a runner that fails to confine fails the battery with its refusal."""
    chosen = [BY_NAME[n] for n in names] if names else ATTEMPTS
    with targets(policy) as context:
        if runners <= 1 or len(chosen) < 2:
            return [run_attempt(a, context, policy) for a in chosen]
        shares = [chosen[i::runners] for i in range(min(runners, len(chosen)))]
        done = _in_runners(shares, context, policy)
    order = {a.name: i for i, a in enumerate(chosen)}
    return sorted(done, key=lambda r: order[r.name])


def _in_runners(shares: list, context: dict, policy) -> list[Result]:
    """Each share of attempts in a forked runner that answers with JSON over a pipe."""
    pipes = []
    for share in shares:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            try:
                out = {"results": [dataclasses.asdict(run_attempt(a, context, policy)) for a in share]}
            except RtdError as e:
                out = {"error": e.to_json()}
            except BaseException as e:   # anything else is still an answer, never a silent gap
                out = {"error": {"code": Code.E_INTERNAL.name, "detail": f"{type(e).__name__}: {e}"}}
            with os.fdopen(write, "w") as f:
                json.dump(out, f)
            os._exit(0)
        os.close(write)
        pipes.append((pid, read))
    answers = []
    for pid, read in pipes:   # each answer is a few hundred bytes per attempt: it fits the pipe
        with os.fdopen(read) as f:
            text = f.read()
        os.waitpid(pid, 0)
        answers.append(json.loads(text) if text else {"error": {"code": Code.E_INTERNAL.name, "detail": "a runner died"}})
    results = []
    for answer in answers:
        if "error" in answer:
            raise RtdError(Code[answer["error"]["code"]], answer["error"]["detail"])
        results += [Result(**r) for r in answer["results"]]
    return results
