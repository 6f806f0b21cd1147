"""The worker's seccomp filter (pyseccomp): default kill-process, the few dozen syscalls a
warmed-up NumPy worker makes, argument filters where the call is dangerous in general
(clone for threads only, no PROT_EXEC, short ioctl/fcntl lists, memfds without exec),
native architecture only, loaded on all threads. The filter is compiled to BPF once in
the launcher before any fork; the confined child only installs the bytes."""
import errno
import functools
import os

import pyseccomp as sc

from rtd.sandbox import syscalls

ALLOW = (
    # fd I/O on the RPC socket and received memfds
    "read write readv writev pread64 pwrite64 lseek close close_range recvfrom sendto recvmsg sendmsg "
    "shutdown getsockname getpeername getsockopt poll ppoll pselect6 select epoll_create1 epoll_ctl "
    "epoll_wait epoll_pwait dup dup3 fstat newfstatat statx fstatfs ftruncate "
    # memory
    "brk munmap mremap madvise membarrier "
    # threads (BLAS pools)
    "futex set_robust_list get_robust_list rseq set_tid_address gettid sched_yield sched_getaffinity "
    "sched_get_priority_max sched_get_priority_min "
    # signals and exit
    "rt_sigaction rt_sigprocmask rt_sigreturn rt_sigpending rt_sigtimedwait sigaltstack tgkill "
    "exit exit_group restart_syscall "
    # clocks and identity
    "clock_gettime clock_getres clock_nanosleep nanosleep gettimeofday getrandom getpid getppid getuid "
    "geteuid getgid getegid getresuid getresgid getrusage getrlimit prlimit64 uname getcwd"
).split()

# Calls answered with an errno instead of a kill. Paths and executable memory get EPERM, which
# the kernel itself does not give for the calls a worker makes (it says EACCES, ENOENT, EROFS):
# an EPERM from open or mmap is this filter's, so rtctl doctor can tell who refused.
REFUSED = errno.EPERM
ERRNO_RULES = {"clone3": errno.ENOSYS,   # glibc then falls back to clone, which we can filter
               "open": REFUSED, "openat": REFUSED, "mbind": errno.EPERM}

CLONE_THREAD, CLONE_NS_FLAGS = 0x00010000, 0x7E020000
PROT_EXEC = 0x4
IOCTLS = (0x541B, 0x5421, 0x5451, 0x5450)   # FIONREAD FIONBIO FIOCLEX FIONCLEX
TCGETS = 0x5401
FCNTLS = (0, 1, 2, 3, 4, 1030, 1033, 1034)  # DUPFD GETFD SETFD GETFL SETFL DUPFD_CLOEXEC ADD/GET_SEALS
MFD_EXEC, MFD_HUGETLB = 0x10, 0x4
ARG_FILTERED = ("clone", "mmap", "mprotect", "ioctl", "fcntl", "memfd_create")


def build() -> sc.SyscallFilter:
    f = sc.SyscallFilter(sc.KILL_PROCESS)
    f.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)   # native architecture only
    f.set_attr(sc.Attr.CTL_TSYNC, 1)
    f.set_attr(sc.Attr.CTL_NNP, 1)
    for name in ALLOW:
        f.add_rule(sc.ALLOW, name)
    for name, err in ERRNO_RULES.items():
        f.add_rule(sc.ERRNO(err), name)
    # clone: threads only, never a namespace flag (fork, vfork and unshare-by-clone die).
    f.add_rule(sc.ALLOW, "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD | CLONE_NS_FLAGS, CLONE_THREAD))
    for name in ("mmap", "mprotect"):
        f.add_rule(sc.ALLOW, name, sc.Arg(2, sc.MASKED_EQ, PROT_EXEC, 0))
        f.add_rule(sc.ERRNO(REFUSED), name, sc.Arg(2, sc.MASKED_EQ, PROT_EXEC, PROT_EXEC))
    for cmd in IOCTLS:
        f.add_rule(sc.ALLOW, "ioctl", sc.Arg(1, sc.EQ, cmd))
    f.add_rule(sc.ERRNO(errno.ENOTTY), "ioctl", sc.Arg(1, sc.EQ, TCGETS))
    for cmd in FCNTLS:
        f.add_rule(sc.ALLOW, "fcntl", sc.Arg(1, sc.EQ, cmd))
    f.add_rule(sc.ALLOW, "memfd_create", sc.Arg(1, sc.MASKED_EQ, MFD_EXEC | MFD_HUGETLB, 0))
    return f


@functools.lru_cache(maxsize=1)
def compiled() -> bytes:
    """The filter as classic BPF bytes, ready for `install`."""
    read_fd, write_fd = os.pipe()
    try:
        with os.fdopen(write_fd, "wb", closefd=True) as w:
            build().export_bpf(w)
        with os.fdopen(read_fd, "rb", closefd=False) as r:
            program = r.read()
    finally:
        os.close(read_fd)
    if not program or len(program) % 8:
        raise OSError(0, "libseccomp produced no BPF program")
    return program


def install(program: bytes):
    """Load the filter; requires no_new_privs (set by privileges.drop)."""
    syscalls.seccomp_load_bpf(program)


def status() -> str:
    try:
        with open("/proc/sys/kernel/seccomp/actions_avail") as f:
            actions = f.read().split()
    except OSError:
        return "unavailable: kernel without seccomp filters"
    if "kill_process" not in actions:
        return "unavailable: kernel lacks SECCOMP_RET_KILL_PROCESS"
    return (f"enforced (kill-process allow-list of {len(ALLOW) + len(ARG_FILTERED)} syscalls, "
            f"{len(ARG_FILTERED)} with argument filters, TSYNC)")
