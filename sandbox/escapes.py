"""The escape battery as data: each attempt is a function run *inside* a confined worker
that tries one escape and reports whether the kernel refused it, plus the layers
expected to stop it, in order (the first active one is credited). Used by
tests/security/test_escapes.py and `rtctl doctor`.

An attempt returns {"blocked": bool, "how": str} and "layer" where what it saw can only come
from one layer; a worker killed by a layer (SIGSYS, OOM, SIGXFSZ) is blocked by that layer; a
worker that vanished without a kill escaped. Other refusals are still credited to the first
expected layer (an errno alone does not say which layer gave it)."""
import contextlib
import ctypes
import dataclasses
import errno
import mmap
import os
import socket
import tempfile
import time

import numpy

from rtd.errors import Code, RtdError
from rtd.sandbox.confined import ConfinedError, SandboxKilled, run_confined
from rtd.sandbox.syscalls import libc

NR = {"clone": 56, "add_key": 248, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
      "io_uring_setup": 425, "open_by_handle_at": 304, "reboot": 169, "init_module": 175}
CLONE_NEWUSER, SIGCHLD = 0x10000000, 17


def _sys(nr: int, *args) -> int:
    result = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def _refused(action) -> dict:
    """Run `action`; blocked if the kernel refused it with an errno."""
    try:
        action()
    except OSError as e:
        return {"blocked": True, "how": errno.errorcode.get(e.errno, str(e.errno))}
    return {"blocked": False, "how": "the call succeeded"}


def _open(path: str, flags=os.O_RDONLY):
    return lambda: os.close(os.open(path, flags, 0o600))


def _connect(family: int, address) -> dict:
    def go():
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(2)
            s.connect(address)
    return _refused(go)


def _clone_newuser():
    pid = _sys(NR["clone"], CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0)
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
        return {"blocked": children < ctx["pids"], "how": f"{errno.errorcode[e.errno]} after {children} forks"}
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
        observed = {"layer": "rlimits"} if e.errno == errno.EFBIG else {}   # only RLIMIT_FSIZE answers EFBIG
        return {"blocked": written <= ctx["fsize_bytes"], "how": f"{errno.errorcode[e.errno]} after {written} bytes", **observed}
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
        raise OSError(ctypes.get_errno(), "mprotect")


def _open_by_handle():
    handle = ctypes.create_string_buffer(8 + 128)
    ctypes.c_uint32.from_buffer(handle).value = 128
    os.close(_sys(NR["open_by_handle_at"], -100, handle, os.O_RDONLY))


@dataclasses.dataclass(frozen=True)
class Attempt:
    name: str
    stops: tuple[str, ...]      # layers expected to stop it, in order
    run: object                 # run(context) -> {"blocked": bool, "how": str}


ATTEMPTS = [Attempt(*a) for a in [
    ("ptrace_supervisor", ("seccomp", "namespaces"), lambda c: _refused(lambda: _sys(101, 16, c["supervisor_pid"], 0, 0))),
    ("kill_supervisor", ("seccomp", "namespaces"), lambda c: _refused(lambda: os.kill(c["supervisor_pid"], 0))),
    ("unshare_userns", ("seccomp",), lambda c: _refused(lambda: _sys(272, CLONE_NEWUSER))),
    ("clone_newuser", ("seccomp",), lambda c: _refused(_clone_newuser)),
    ("setns_mount", ("seccomp", "privileges"), lambda c: _refused(
        lambda: _sys(308, os.open("/proc/self/ns/mnt", os.O_RDONLY), 0))),
    ("mount_tmpfs", ("seccomp", "privileges"), lambda c: _refused(
        lambda: _sys(165, b"none", b"/scratch", b"tmpfs", 0, 0))),
    ("chroot", ("seccomp", "privileges"), lambda c: _refused(lambda: os.chroot("/scratch"))),
    ("setuid_root", ("seccomp", "privileges"), lambda c: _refused(lambda: os.setuid(0))),
    ("keyctl_add_key", ("seccomp",), lambda c: _refused(
        lambda: _sys(NR["add_key"], b"user", b"rtd-escape", b"x", 1, -2))),
    ("bpf_map_create", ("seccomp", "privileges"), lambda c: _refused(
        lambda: _sys(NR["bpf"], 0, (ctypes.c_uint32 * 5)(2, 4, 8, 1, 0), 20))),
    ("perf_event_open", ("seccomp",), lambda c: _refused(
        lambda: _sys(NR["perf_event_open"], (ctypes.c_uint32 * 32)(1, 128), 0, -1, -1, 0))),
    ("userfaultfd", ("seccomp",), lambda c: _refused(lambda: os.close(_sys(NR["userfaultfd"], 1)))),
    ("io_uring_setup", ("seccomp",), lambda c: _refused(
        lambda: os.close(_sys(NR["io_uring_setup"], 4, (ctypes.c_uint32 * 30)())))),
    ("personality_exec", ("seccomp",), lambda c: _refused(lambda: _sys(135, 0x0400000))),
    ("socket_inet", ("seccomp", "namespaces"), lambda c: _connect(socket.AF_INET, ("1.1.1.1", 53))),
    ("socket_inet6", ("seccomp", "namespaces"), lambda c: _connect(socket.AF_INET6, ("2606:4700:4700::1111", 53))),
    ("socket_netlink", ("seccomp",), lambda c: _refused(
        lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close())),
    ("socket_packet", ("seccomp", "privileges"), lambda c: _refused(
        lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0).close())),
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
    ("execve_shell", ("seccomp", "mounts"), lambda c: _refused(lambda: os.execv("/usr/bin/sh", ["sh", "-c", "exit 0"]))),
    ("mmap_prot_exec", ("seccomp",), lambda c: _refused(
        lambda: mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_EXEC).close())),
    ("mprotect_exec", ("seccomp",), lambda c: _refused(_mprotect_exec)),
    ("fork_bomb", ("seccomp", "pids"), _fork_bomb),
    ("memory_bomb", ("memory",), _memory_bomb),
    ("tiocsti", ("seccomp", "privileges"), _tiocsti),
    ("open_by_handle_at", ("seccomp", "privileges"), lambda c: _refused(_open_by_handle)),
    ("reboot", ("seccomp", "privileges"), lambda c: _refused(
        lambda: _sys(NR["reboot"], 0xFEE1DEAD, 672274793, 0, 0))),   # CAD_OFF: harmless even if allowed
    ("init_module", ("seccomp",), lambda c: _refused(lambda: _sys(NR["init_module"], b"\0" * 64, 64, b""))),
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
    """Run one attempt in a fresh confined worker under `policy` and say who stopped it."""
    active = [s for s in attempt.stops if not (s == "seccomp" and policy.unsafe_disable_seccomp)]
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
    # the layer the attempt observed itself (an errno only one layer gives), else the first expected
    credited = out.get("layer") or (active[0] if active else None)
    return Result(attempt.name, out["blocked"], credited if out["blocked"] else None, out["how"])


def run_battery(policy, names=None) -> list[Result]:
    chosen = [BY_NAME[n] for n in names] if names else ATTEMPTS
    with targets(policy) as context:
        return [run_attempt(a, context, policy) for a in chosen]
