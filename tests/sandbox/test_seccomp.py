"""The seccomp filter's argument rules, exercised inside a real confined worker: what a
warmed-up worker needs works, the errno rules answer as designed, the rest kills."""
import ctypes
import errno
import os
import signal
import threading

import pytest

from rtd.sandbox import SandboxKilled, run_confined
from rtd.sandbox import seccomp
from rtd.sandbox.syscalls import libc

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="confined workers need root")


def test_filter_compiles_to_bpf_once():
    compiled = seccomp.compiled()
    (program,) = compiled.programs
    assert len(program) % 8 == 0 and 50 < len(program) // 8 < 4096
    assert seccomp.compiled() is compiled and not compiled.traps


def errno_of(nr, *args):
    ctypes.set_errno(0)
    result = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    return errno.errorcode.get(ctypes.get_errno()) if result < 0 else "ok"


def needs_inside():
    box = []
    worker = threading.Thread(target=lambda: box.append(sum(range(1000))))   # clone3 → ENOSYS → clone(THREAD)
    worker.start()
    worker.join()
    return {"thread": box == [499500],
            "clone3": errno_of(435, 0, 0),                       # ENOSYS so glibc falls back
            "tcgets": errno_of(16, 0, 0x5401, 0),                 # ioctl TCGETS → ENOTTY, not a kill
            "fionbio": errno_of(16, 0, 0x5421, 0),                # allowed ioctl: EBADF on a closed fd
            "mbind": errno_of(237, 0, 0, 0, 0, 0, 0),            # OpenBLAS probes it: EPERM
            "openat": errno_of(257, -100, 0, 0),                  # no paths: EPERM (the kernel's own is EACCES)
            "memfd": os.memfd_create("x") >= 0}


def test_what_a_worker_needs_works_and_errno_rules_answer():
    assert run_confined(needs_inside) == {"thread": True, "clone3": "ENOSYS", "tcgets": "ENOTTY",
                                          "fionbio": "EBADF", "mbind": "EPERM", "openat": "EPERM",
                                          "memfd": True}


@pytest.mark.parametrize("call", [
    (56, 0x11, 0, 0, 0, 0),          # clone(SIGCHLD): a fork, not a thread
    (56, 0x10000 | 0x20000000, 0, 0, 0, 0),   # clone(CLONE_THREAD|CLONE_NEWPID)
    (319, 0, 0x10),                  # memfd_create(MFD_EXEC)
    (72, 0, 1025),                   # fcntl(F_SETLEASE)
    (41, 2, 1, 0),                   # socket(AF_INET)
], ids=["fork", "thread_with_namespace", "memfd_exec", "fcntl_setlease", "socket"])
def test_outside_the_rules_kills(call):
    with pytest.raises(SandboxKilled) as e:
        run_confined(errno_of, *call)
    assert e.value.signal == signal.SIGSYS and e.value.layer == "seccomp"
