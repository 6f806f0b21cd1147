"""Privilege drop: only the RPC socket stays open, a new session (no controlling tty, so
no TIOCSTI), parent-death signal, empty capability bounding/ambient/effective sets, the
tenant's own uid/gid, no_new_privs, not dumpable. Each step is checked, never assumed."""
import os
import signal

from rtd.sandbox import syscalls as sc

with open("/proc/sys/kernel/cap_last_cap") as _f:
    CAP_LAST = int(_f.read())


def keep_only_fds(keep: set[int]):
    """Close every fd except those in `keep` (fds 0-2 included)."""
    low = 0
    for fd in sorted(keep):
        if fd > low:
            os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 0x7FFFFFFF)   # close_range(2): every fd number above, whatever RLIMIT_NOFILE was


def new_session():
    os.setsid()


def die_with_parent():
    sc.prctl(sc.PR_SET_PDEATHSIG, signal.SIGKILL)


def drop(uid: int, gid: int, in_userns: bool):
    """Empty the bounding and ambient sets while still privileged, then become uid/gid,
    then clear what capabilities remain (a user namespace's creator keeps them across a
    same-uid setresuid), set no_new_privs and non-dumpable, and verify the result."""
    for cap in range(CAP_LAST + 1):
        sc.prctl(sc.PR_CAPBSET_DROP, cap)
    sc.prctl(sc.PR_CAP_AMBIENT, sc.PR_CAP_AMBIENT_CLEAR_ALL)
    if not in_userns:
        os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    sc.capset_empty()
    sc.prctl(sc.PR_SET_NO_NEW_PRIVS, 1)
    sc.prctl(sc.PR_SET_DUMPABLE, 0)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid) or sc.capabilities() != (0, 0):
        raise OSError(1, "privilege drop did not take")
