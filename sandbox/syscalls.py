"""Thin ctypes wrappers for the Linux calls Python's os module lacks (unshare, mount,
pivot_root, prctl, capset, seccomp). Each raises OSError with the kernel's errno.
The libc handle is opened at import, so nothing is loaded after confinement."""
import ctypes
import os
import platform

from rtd.errors import Code, RtdError

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

NR_BY_MACHINE = {   # the calls made by number; the seccomp filter names calls, libseccomp numbers them
    "x86_64": {"pivot_root": 155, "capget": 125, "capset": 126, "seccomp": 317},
    "aarch64": {"pivot_root": 41, "capget": 90, "capset": 91, "seccomp": 277},   # asm-generic/unistd.h
}
NR = NR_BY_MACHINE.get(platform.machine(), {})


def check_architecture() -> None:
    """rtd serve's first step: on a machine whose numbers rtd does not know, refuse to start."""
    if platform.machine() not in NR_BY_MACHINE:
        raise RtdError(Code.E_ARCH_UNSUPPORTED, f"this machine is {platform.machine() or 'unknown'}")


def architecture_status() -> str:
    try:
        check_architecture()
    except RtdError as e:
        return f"unsupported: {e.detail}; rtd serve refuses to start"
    return f"supported ({platform.machine()})"

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS = 0x00020000, 0x02000000, 0x04000000
CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x08000000, 0x10000000, 0x20000000, 0x40000000

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2

PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP = 1, 4, 24
PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 38, 47, 4
PR_SET_CHILD_SUBREAPER = 36


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def unshare(flags: int):
    _check(libc.unshare(flags), "unshare")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None):
    enc = lambda s: None if s is None else s.encode()
    _check(libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def umount2(target: str, flags: int):
    _check(libc.umount2(target.encode(), flags), f"umount {target}")


def pivot_root(new_root: str, put_old: str):
    _check(libc.syscall(NR["pivot_root"], new_root.encode(), put_old.encode()), "pivot_root")


def prctl(option: int, arg2: int = 0, arg3: int = 0) -> int:
    return _check(libc.prctl(option, ctypes.c_ulong(arg2), ctypes.c_ulong(arg3), 0, 0), f"prctl({option})")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def capset_empty():
    """Clear the effective, permitted and inheritable capability sets of this thread."""
    header, data = _CapHeader(0x20080522, 0), (_CapData * 2)()
    _check(libc.syscall(NR["capset"], ctypes.byref(header), data), "capset")


def capabilities() -> tuple[int, int]:
    """(effective, permitted) capability masks of this thread."""
    header, data = _CapHeader(0x20080522, 0), (_CapData * 2)()
    _check(libc.syscall(NR["capget"], ctypes.byref(header), data), "capget")
    return (data[0].effective | data[1].effective << 32, data[0].permitted | data[1].permitted << 32)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC = 1, 1


def seccomp_load_bpf(program: bytes):
    """Install a compiled classic-BPF filter on every thread (TSYNC)."""
    buf = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    _check(libc.syscall(NR["seccomp"], SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, ctypes.byref(prog)),
           "seccomp")
