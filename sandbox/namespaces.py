"""Namespaces: pid, mount, net (loopback only, left down), ipc, uts and cgroup, inside a
user namespace when the host allows one. The user-namespace path switches to the
tenant's host uid *before* unsharing, so the namespace maps only that uid onto itself
and the worker never holds a capability outside it."""
import os
import socket

from rtd.sandbox import syscalls

BASE_FLAGS = (syscalls.CLONE_NEWNS | syscalls.CLONE_NEWPID | syscalls.CLONE_NEWNET | syscalls.CLONE_NEWIPC
              | syscalls.CLONE_NEWUTS | syscalls.CLONE_NEWCGROUP)


def userns_status() -> str:
    """Whether this host lets a process create a user namespace."""
    try:
        with open("/proc/sys/user/max_user_namespaces") as f:
            if int(f.read()) == 0:
                return "unavailable: user.max_user_namespaces is 0"
    except OSError:
        return "unavailable: kernel built without user namespaces"
    try:
        with open("/proc/sys/kernel/unprivileged_userns_clone") as f:
            if f.read().strip() == "0":
                return "unavailable: kernel.unprivileged_userns_clone is 0"
    except OSError:
        pass
    return "enforced (own uid mapped onto itself, no capability outside)"


def _write(path: str, text: str):
    with open(path, "w") as f:
        f.write(text)


def enter(uid: int, gid: int, with_userns: bool):
    """Unshare every namespace; with a user namespace, first become uid/gid on the host
    (the caller is root) and then map exactly that uid/gid inside. The caller must fork
    afterwards: the child is pid 1 of the new pid namespace."""
    if not with_userns:
        syscalls.unshare(BASE_FLAGS)
        return
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    syscalls.prctl(syscalls.PR_SET_DUMPABLE, 1)   # else /proc/self/*_map stay owned by root
    syscalls.unshare(syscalls.CLONE_NEWUSER | BASE_FLAGS)
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1\n")
    _write("/proc/self/gid_map", f"{gid} {gid} 1\n")


def set_hostname():
    socket.sethostname("rtd-worker")
