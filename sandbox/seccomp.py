"""The worker's seccomp filter (pyseccomp): default kill-process, the few dozen syscalls a
warmed-up NumPy worker makes, argument filters where the call is dangerous in general
(clone for threads only, no PROT_EXEC, short ioctl/fcntl lists, memfds without exec),
native architecture only, loaded on all threads. Two variants: "cpu", and "gpu" for a
worker whose policy grants GPUs, which adds what CUDA does after its initialisation (the
NVIDIA and UVM ioctls by number, naming its threads) and what NVRTC does to read the
headers of a kernel compiled when a model loads (opening files read-only, stat). Each is
compiled to BPF once in the launcher before any fork; the confined child only installs the bytes."""
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

# The GPU variant. CUDA's calls after cuInit and context creation (which run before the
# filter, see contain) are ioctls on the fds it opened then, mmap of those fds (MAP_SHARED
# device and UVM memory: the mmap rule above already allows it, never with PROT_EXEC), futex
# and poll for its helper threads, and naming those threads. The ioctl lists follow the ones
# gVisor's nvproxy lets through to the host driver for the compute and utility capabilities
# (pkg/sentry/devices/nvproxy/seccomp_filters.go), numbered from NVIDIA's
# open-gpu-kernel-modules headers.
#
# nvidiactl and nvidiaN: _IOWR('F', nr, size) with a per-driver struct size, so matched on
# direction, type and number with the size bits masked (the driver checks the size itself).
NV_IOCTL_MASK = 0xC000FFFF                 # _IOC direction (bits 30-31), type (8-15), number (0-7)
NV_IOCTL_BASE = 0xC0000000 | ord("F") << 8  # _IOWR, type 'F' (NV_IOCTL_MAGIC)
NVIDIA_IOCTLS = {
    # kernel-open/common/inc/nv-ioctl-numbers.h (NV_IOCTL_BASE 200) and nv-ioctl-numa.h
    "NV_ESC_CARD_INFO": 200, "NV_ESC_REGISTER_FD": 201, "NV_ESC_ALLOC_OS_EVENT": 206,
    "NV_ESC_FREE_OS_EVENT": 207, "NV_ESC_CHECK_VERSION_STR": 210, "NV_ESC_ATTACH_GPUS_TO_FD": 212,
    "NV_ESC_SYS_PARAMS": 214, "NV_ESC_NUMA_INFO": 215, "NV_ESC_WAIT_OPEN_COMPLETE": 218,
    # src/nvidia/arch/nvalloc/unix/include/nv_escape.h: the resource manager's API
    "NV_ESC_RM_ALLOC_MEMORY": 0x27, "NV_ESC_RM_FREE": 0x29, "NV_ESC_RM_CONTROL": 0x2A, "NV_ESC_RM_ALLOC": 0x2B,
    "NV_ESC_RM_DUP_OBJECT": 0x34, "NV_ESC_RM_SHARE": 0x35, "NV_ESC_RM_VID_HEAP_CONTROL": 0x4A,
    "NV_ESC_RM_MAP_MEMORY": 0x4E, "NV_ESC_RM_UNMAP_MEMORY": 0x4F, "NV_ESC_RM_UPDATE_DEVICE_MAPPING_INFO": 0x5E,
}
# nvidia-uvm: plain numbers (UVM_IOCTL_BASE(i) is i on Linux), kernel-open/nvidia-uvm/uvm_ioctl.h and
# uvm_linux_ioctl.h. Left out: the tools interface (UVM_TOOLS_*: reading and writing process memory,
# event queues), sessions and counters, test calls, the MPS server.
UVM_IOCTLS = {
    "UVM_INITIALIZE": 0x30000001, "UVM_DEINITIALIZE": 0x30000002, "UVM_CREATE_RANGE_GROUP": 23,
    "UVM_DESTROY_RANGE_GROUP": 24, "UVM_REGISTER_GPU_VASPACE": 25, "UVM_UNREGISTER_GPU_VASPACE": 26,
    "UVM_REGISTER_CHANNEL": 27, "UVM_UNREGISTER_CHANNEL": 28, "UVM_ENABLE_PEER_ACCESS": 29,
    "UVM_DISABLE_PEER_ACCESS": 30, "UVM_SET_RANGE_GROUP": 31, "UVM_MAP_EXTERNAL_ALLOCATION": 33, "UVM_FREE": 34,
    "UVM_REGISTER_GPU": 37, "UVM_UNREGISTER_GPU": 38, "UVM_PAGEABLE_MEM_ACCESS": 39,
    "UVM_SET_PREFERRED_LOCATION": 42, "UVM_UNSET_PREFERRED_LOCATION": 43, "UVM_DISABLE_READ_DUPLICATION": 45,
    "UVM_UNSET_ACCESSED_BY": 47, "UVM_MIGRATE": 51, "UVM_MIGRATE_RANGE_GROUP": 53,
    "UVM_MAP_DYNAMIC_PARALLELISM_REGION": 65, "UVM_UNMAP_EXTERNAL": 66, "UVM_ALLOC_SEMAPHORE_POOL": 68,
    "UVM_VALIDATE_VA_RANGE": 72, "UVM_CREATE_EXTERNAL_RANGE": 73, "UVM_MM_INITIALIZE": 75,
}
# CUDA names its helper threads (cuda-EvtHandlR, cuda0000...) with pthread_setname_np, which
# is prctl(PR_SET_NAME) for the calling thread; no other prctl option.
PR_SET_NAME = 15
# NVRTC opens the headers a kernel #includes at every compile (CuPy's and CUDA's, bound
# read-only in a GPU worker's root: gpu.header_dirs), and CuPy compiles a model's kernels when
# it loads, which in a spare worker is after this filter. So the GPU variant lets open and
# openat through when their flags ask for no write: none of WRITE_FLAGS (O_TMPFILE less its
# O_DIRECTORY bit, which a read-only directory open carries); one that does still gets REFUSED.
# The flags are open's argument 1 and openat's argument 2.
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND | (os.O_TMPFILE & ~os.O_DIRECTORY)
OPEN_FLAGS_ARG = {"open": 1, "openat": 2}
# What else NVRTC calls to read a header, seen with strace on a second compile (the first,
# run by the initialiser before the filter, also loads libnvrtc-builtins) of a CuPy
# element-wise source (its four prepended headers and cuda_fp16.h, CuPy's -I options) with
# libnvrtc 13: openat(O_RDONLY), read, lseek, close, fstat/newfstatat, getcwd, gettid, brk,
# prlimit64, clock_gettime, all allowed above, and stat(2) on every candidate path of every -I
# directory. stat is x86_64's legacy call (aarch64 has only newfstatat). No access,
# faccessat or readlink: those stay out.
GPU_FILE_CALLS = ("stat",)
VARIANTS = ("cpu", "gpu")


def nvidia_ioctl(number: int) -> int:
    """The ioctl command CUDA sends for an NV_ESC_* number (size bits 0: the filter ignores them)."""
    return NV_IOCTL_BASE | number


def _native(name: str) -> bool:
    """Whether this architecture has the call (aarch64 has no open or stat)."""
    return sc.resolve_syscall(sc.Arch.NATIVE, name) >= 0


def build(variant: str = "cpu") -> sc.SyscallFilter:
    if variant not in VARIANTS:
        raise ValueError(f"seccomp variant {variant!r}; variants: {VARIANTS}")
    f = sc.SyscallFilter(sc.KILL_PROCESS)
    f.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)   # native architecture only
    f.set_attr(sc.Attr.CTL_TSYNC, 1)
    f.set_attr(sc.Attr.CTL_NNP, 1)
    for name in ALLOW:
        f.add_rule(sc.ALLOW, name)
    for name, err in ERRNO_RULES.items():
        if not (variant == "gpu" and name in OPEN_FLAGS_ARG):   # the GPU variant's open rules take flags
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
    if variant == "gpu":
        for number in NVIDIA_IOCTLS.values():
            f.add_rule(sc.ALLOW, "ioctl", sc.Arg(1, sc.MASKED_EQ, NV_IOCTL_MASK, nvidia_ioctl(number)))
        for cmd in UVM_IOCTLS.values():
            f.add_rule(sc.ALLOW, "ioctl", sc.Arg(1, sc.EQ, cmd))
        f.add_rule(sc.ALLOW, "prctl", sc.Arg(0, sc.EQ, PR_SET_NAME))
        for name, arg in OPEN_FLAGS_ARG.items():
            if _native(name):
                f.add_rule(sc.ALLOW, name, sc.Arg(arg, sc.MASKED_EQ, WRITE_FLAGS, 0))
                for bit in _bits(WRITE_FLAGS):   # any write flag: the filter's errno, one rule per bit
                    f.add_rule(sc.ERRNO(REFUSED), name, sc.Arg(arg, sc.MASKED_EQ, bit, bit))
        for name in filter(_native, GPU_FILE_CALLS):
            f.add_rule(sc.ALLOW, name)
    return f


def _bits(mask: int) -> list[int]:
    return [1 << i for i in range(mask.bit_length()) if mask >> i & 1]


@functools.lru_cache(maxsize=len(VARIANTS))
def compiled(variant: str = "cpu") -> bytes:
    """The variant's filter as classic BPF bytes, ready for `install`."""
    read_fd, write_fd = os.pipe()
    try:
        with os.fdopen(write_fd, "wb", closefd=True) as w:
            build(variant).export_bpf(w)
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


def gpu_status() -> str:
    """Whether the GPU variant compiles here (libseccomp takes its masked ioctl rules)."""
    try:
        program = compiled("gpu")
    except (OSError, RuntimeError, ValueError) as e:
        return f"unavailable: the GPU filter does not compile ({e})"
    return (f"compiles ({len(program) // 8} BPF instructions: {len(NVIDIA_IOCTLS)} NVIDIA ioctls by direction, "
            f"type and number, {len(UVM_IOCTLS)} UVM ioctls, prctl PR_SET_NAME, "
            f"{'/'.join(filter(_native, OPEN_FLAGS_ARG))} read-only by flags and "
            f"{', '.join(filter(_native, GPU_FILE_CALLS)) or 'nothing else'} for NVRTC's headers)")
