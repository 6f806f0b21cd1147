"""The worker's seccomp filter (pyseccomp): default kill-process, the few dozen syscalls a
warmed-up NumPy worker makes, argument filters where the call is dangerous in general
(clone for threads only, no PROT_EXEC, short ioctl/fcntl lists, memfds without exec),
native architecture only, loaded on all threads. Variants: "cpu"; "gpu" for a worker whose
policy grants GPUs, which adds what CUDA does after its initialisation (the NVIDIA and UVM
ioctls by number, naming its threads) and what NVRTC does to read the headers of a kernel
compiled when a model loads (opening files read-only, stat); "gpu-audit", the same where the
policy turns `unsafe_gpu_audit` on. Each is compiled to BPF once in the launcher before any
fork; the confined child only installs the bytes.

A GPU filter learns instead of killing where that is safe. Besides what it allows and what
kills, it knows a third kind of call: ones CUDA or the driver's library may make after the
filter that are harmless refused (GPU_LEARNED_CALLS, NVIDIA and UVM ioctls outside the list
but not forbidden, executable mappings, opens with write flags). Those are trapped
(SECCOMP_RET_TRAP): the worker's SIGSYS handler (sandbox/sigsys.c) records the call and its
first arguments and the call fails with EPERM, so the worker answers E_SYSCALL_REFUSED naming
the call instead of dying as a crashed model. Anything else still kills, as in the CPU filter.
In "gpu-audit" the learned calls go through and the kernel logs them (SECCOMP_RET_LOG: dmesg
or the audit log, `type=1326 ... syscall=N`), and what would kill is trapped and named
instead, except FORBIDDEN_CALLS and the forbidden ioctls, which kill in every variant:
weakening, for an operator finding what a new driver needs (bench/gpu_check.sh runs it).

libseccomp orders a syscall's argument rules its own way, so rules of different actions on
one syscall must never overlap; a GPU filter is therefore two programs, which the kernel
both runs, taking the strictest answer (kill > trap > errno > log > allow): DECIDE kills what
is neither allowed nor learned (audit: traps it) and answers the errno rules, and GATE,
allowing exactly what is allowed, traps (audit: logs) everything else. Together: allowed
calls run, learned calls trap (log), the rest kills (traps).
"""
import dataclasses
import errno
import functools
import os

import pyseccomp as sc

from rtd.sandbox import sigsys, syscalls

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

# The GPU variants. CUDA's calls after cuInit and context creation (which run before the
# filter, see contain) are ioctls on the fds it opened then, mmap of those fds (MAP_SHARED
# device and UVM memory: the mmap rule above already allows it, never with PROT_EXEC), futex
# and poll for its helper threads, and naming those threads. The ioctl lists follow the ones
# gVisor's nvproxy lets through to the host driver for the compute and utility capabilities
# (pkg/sentry/devices/nvproxy/seccomp_filters.go), numbered from NVIDIA's
# open-gpu-kernel-modules headers (scripts/check_nvidia_ioctls.py checks a release's headers
# against these tables; policies/nvidia_drivers.toml lists the releases that passed).
#
# nvidiactl and nvidiaN: _IOWR('F', nr, size) with a per-driver struct size, so matched on
# direction, type and number with the size bits masked (the driver checks the size itself).
NV_IOCTL_MASK = 0xC000FFFF                 # _IOC direction (bits 30-31), type (8-15), number (0-7)
NV_IOCTL_BASE = 0xC0000000 | ord("F") << 8  # _IOWR, type 'F' (NV_IOCTL_MAGIC)
NV_TYPE = ord("F") << 8
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
# The other numbers those headers define (drivers 535 to 595), for naming a refusal. They are
# learned, not allowed: NV_ESC_IOCTL_XFER_CMD carries another command's number in memory the
# filter cannot read (the driver runs the inner command), NV_ESC_STATUS_CODE and the rest are
# outside nvproxy's list. Forbidden (a kill in every variant): the board's I2C bus, the driver's
# registry and configuration, the host's NUMA state, the driver's logs and lock-free diagnostics.
NVIDIA_UNLISTED = {
    "NV_ESC_RM_CONFIG_GET": 0x32, "NV_ESC_RM_CONFIG_SET": 0x33, "NV_ESC_RM_CONFIG_GET_EX": 0x37,
    "NV_ESC_RM_CONFIG_SET_EX": 0x38, "NV_ESC_RM_NVLOG_CTRL": 0x5F,   # 535's name of the number LOCKLESS_DIAGNOSTIC took
    "NV_ESC_STATUS_CODE": 209, "NV_ESC_IOCTL_XFER_CMD": 211, "NV_ESC_QUERY_DEVICE_INTR": 213,
    "NV_ESC_SET_NUMA_STATUS": 216, "NV_ESC_EXPORT_TO_DMABUF_FD": 217,
    "NV_ESC_RM_ALLOC_OBJECT": 0x28, "NV_ESC_RM_I2C_ACCESS": 0x39, "NV_ESC_RM_IDLE_CHANNELS": 0x41,
    "NV_ESC_RM_ACCESS_REGISTRY": 0x4D, "NV_ESC_RM_GET_EVENT_DATA": 0x52, "NV_ESC_RM_ALLOC_CONTEXT_DMA2": 0x54,
    "NV_ESC_RM_ADD_VBLANK_CALLBACK": 0x56, "NV_ESC_RM_MAP_MEMORY_DMA": 0x57, "NV_ESC_RM_UNMAP_MEMORY_DMA": 0x58,
    "NV_ESC_RM_BIND_CONTEXT_DMA": 0x59, "NV_ESC_RM_EXPORT_OBJECT_TO_FD": 0x5C, "NV_ESC_RM_IMPORT_OBJECT_FROM_FD": 0x5D,
    "NV_ESC_RM_LOCKLESS_DIAGNOSTIC": 0x5F,
}
NVIDIA_FORBIDDEN = ("NV_ESC_RM_I2C_ACCESS", "NV_ESC_RM_ACCESS_REGISTRY", "NV_ESC_RM_CONFIG_SET", "NV_ESC_RM_CONFIG_SET_EX",
                    "NV_ESC_SET_NUMA_STATUS", "NV_ESC_RM_LOCKLESS_DIAGNOSTIC")
# nvidia-uvm: plain numbers (UVM_IOCTL_BASE(i) is i on Linux), kernel-open/nvidia-uvm/uvm_ioctl.h and
# uvm_linux_ioctl.h. Forbidden: the tools interface (UVM_TOOLS_*: reading and writing process memory,
# event queues), the older sessions, counters and event queues, MPS registration, debug memory
# access, the test calls (UVM_RUN_TEST, UVM_TEST_IOCTL_BASE(i) = 200 + i). Any other number below 256
# (and UVM_IS_8_SUPPORTED) is learned.
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
UVM_UNLISTED = {
    "UVM_RESERVE_VA": 1, "UVM_RELEASE_VA": 2, "UVM_REGION_COMMIT": 3, "UVM_REGION_DECOMMIT": 4, "UVM_REGION_SET_STREAM": 5,
    "UVM_SET_STREAM_RUNNING": 6, "UVM_SET_STREAM_STOPPED": 7, "UVM_GET_GPU_UUID_TABLE": 20, "UVM_REGION_SET_BACKING": 21,
    "UVM_REGION_UNSET_BACKING": 22, "UVM_MEM_MAP": 35, "UVM_PREVENT_MIGRATION_RANGE_GROUPS": 40,
    "UVM_ALLOW_MIGRATION_RANGE_GROUPS": 41, "UVM_ENABLE_SYSTEM_WIDE_ATOMICS": 54, "UVM_DISABLE_SYSTEM_WIDE_ATOMICS": 55,
    "UVM_RUN_TEST": 9, "UVM_REMOVE_SESSION": 11, "UVM_REGISTER_MPS_SERVER": 18, "UVM_REGISTER_MPS_CLIENT": 19,
    "UVM_DEBUG_ACCESS_MEMORY": 36,
    "UVM_ENABLE_READ_DUPLICATION": 44, "UVM_SET_ACCESSED_BY": 46, "UVM_CLEAN_UP_ZOMBIE_RESOURCES": 69,
    "UVM_PAGEABLE_MEM_ACCESS_ON_GPU": 70, "UVM_POPULATE_PAGEABLE": 71, "UVM_MAP_EXTERNAL_SPARSE": 74,
    "UVM_ALLOC_DEVICE_P2P": 78, "UVM_CLEAR_ALL_ACCESS_COUNTERS": 79, "UVM_DISCARD": 80, "UVM_IS_8_SUPPORTED": 2047,
    "UVM_ADD_SESSION": 10, "UVM_ENABLE_COUNTERS": 12, "UVM_MAP_COUNTER": 13, "UVM_CREATE_EVENT_QUEUE": 14,
    "UVM_REMOVE_EVENT_QUEUE": 15, "UVM_MAP_EVENT_QUEUE": 16, "UVM_EVENT_CTRL": 17,
    "UVM_TOOLS_INIT_EVENT_TRACKER": 56, "UVM_TOOLS_SET_NOTIFICATION_THRESHOLD": 57,
    "UVM_TOOLS_EVENT_QUEUE_ENABLE_EVENTS": 58, "UVM_TOOLS_EVENT_QUEUE_DISABLE_EVENTS": 59,
    "UVM_TOOLS_ENABLE_COUNTERS": 60, "UVM_TOOLS_DISABLE_COUNTERS": 61, "UVM_TOOLS_READ_PROCESS_MEMORY": 62,
    "UVM_TOOLS_WRITE_PROCESS_MEMORY": 63, "UVM_TOOLS_GET_PROCESSOR_UUID_TABLE": 64, "UVM_TOOLS_FLUSH_EVENTS": 67,
    "UVM_TOOLS_INIT_EVENT_TRACKER_V2": 76, "UVM_TOOLS_GET_PROCESSOR_UUID_TABLE_V2": 77,
}
UVM_FORBIDDEN = frozenset(range(9, 20)) | {36} | frozenset(range(56, 65)) | {67, 76, 77} | frozenset(range(200, 256))
UVM_LEARNED_BEYOND = (UVM_UNLISTED["UVM_IS_8_SUPPORTED"],)   # learned numbers above 255
# CUDA names its helper threads (cuda-EvtHandlR, cuda0000...) with pthread_setname_np, which
# is prctl(PR_SET_NAME) for the calling thread; no other prctl option.
PR_SET_NAME = 15
# NVRTC opens the headers a kernel #includes at every compile (CuPy's and CUDA's, bound
# read-only in a GPU worker's root: gpu.header_dirs), and CuPy compiles a model's kernels when
# it loads, which in a spare worker is after this filter. So the GPU variant lets open and
# openat through when their flags ask for no write: none of WRITE_FLAGS (O_TMPFILE less its
# O_DIRECTORY bit, which a read-only directory open carries); one that does is learned (EPERM,
# named). The flags are open's argument 1 and openat's argument 2.
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND | (os.O_TMPFILE & ~os.O_DIRECTORY)
OPEN_FLAGS_ARG = {"open": 1, "openat": 2}
# What else NVRTC calls to read a header, seen with strace on a second compile (the first,
# run by the initialiser before the filter, also loads libnvrtc-builtins) of a CuPy
# element-wise source (its four prepended headers and cuda_fp16.h, CuPy's -I options) with
# libnvrtc 13: openat(O_RDONLY), read, lseek, close, fstat/newfstatat, getcwd, gettid, brk,
# prlimit64, clock_gettime, all allowed above, and stat(2) on every candidate path of every -I
# directory. stat is x86_64's legacy call (aarch64 has only newfstatat). No access,
# faccessat or readlink: those are learned.
GPU_FILE_CALLS = ("stat",)
# Learned in the GPU variants: harmless refused, and what CUDA, its libraries or glibc under
# them may ask after the filter: NUMA policy on a NUMA host (libnuma's probe), memory and
# uptime figures, a link's target (/proc/self/exe), creating CUDA's JIT cache directory
# (CUDA_CACHE_DISABLE is set; the root is read-only anyway), testing or listing a path.
GPU_LEARNED_CALLS = ("get_mempolicy", "set_mempolicy", "sysinfo", "readlink", "readlinkat", "mkdir", "mkdirat",
                     "access", "faccessat", "faccessat2", "statfs", "getdents64")
# A kill in every variant, the audit one included: what escapes, escalates or spies.
FORBIDDEN_CALLS = ("execve", "execveat", "ptrace", "process_vm_readv", "process_vm_writev", "unshare", "setns",
                   "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount",
                   "fspick", "mount_setattr", "bpf", "perf_event_open", "keyctl", "add_key", "request_key",
                   "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot", "swapon",
                   "swapoff", "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups",
                   "setfsuid", "setfsgid", "capset", "userfaultfd", "open_by_handle_at", "name_to_handle_at",
                   "io_uring_setup", "io_uring_enter", "io_uring_register", "socket", "socketpair", "connect", "bind",
                   "listen", "accept", "accept4", "iopl", "ioperm", "acct", "quotactl", "syslog", "seccomp")
VARIANTS = ("cpu", "gpu", "gpu-audit")


def nvidia_ioctl(number: int) -> int:
    """The ioctl command CUDA sends for an NV_ESC_* number (size bits 0: the filter ignores them)."""
    return NV_IOCTL_BASE | number


def _native(name: str) -> bool:
    """Whether this architecture has the call (aarch64 has no open or stat)."""
    try:
        return sc.resolve_syscall(sc.Arch.NATIVE, name) >= 0
    except ValueError:   # libseccomp does not know it on this architecture
        return False


def aligned_blocks(numbers: set[int], bits: int) -> list[tuple[int, int]]:
    """(mask, value) pairs whose matches are exactly `numbers` (within [0, 2**bits)): aligned
    power-of-two blocks, so a set with holes costs a few masked rules, not one rule per number."""
    blocks, start, end = [], 0, 1 << bits
    while start < end:
        size = start & -start or end
        while size > 1 and (start + size > end or not all(n in numbers for n in range(start, start + size))):
            size //= 2
        if size > 1 or start in numbers:
            blocks.append(((~(size - 1)) & ((1 << bits) - 1), start))
        start += size
    return blocks


def _new(default: int) -> sc.SyscallFilter:
    f = sc.SyscallFilter(default)
    f.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)   # native architecture only
    f.set_attr(sc.Attr.CTL_TSYNC, 1)
    f.set_attr(sc.Attr.CTL_NNP, 1)
    return f


def _allowed_ioctls(f: sc.SyscallFilter, variant: str) -> None:
    """The ioctls the variant allows, one ALLOW rule each (DECIDE and GATE share them)."""
    for cmd in IOCTLS:
        f.add_rule(sc.ALLOW, "ioctl", sc.Arg(1, sc.EQ, cmd))
    if variant != "cpu":
        for number in NVIDIA_IOCTLS.values():
            f.add_rule(sc.ALLOW, "ioctl", sc.Arg(1, sc.MASKED_EQ, NV_IOCTL_MASK, nvidia_ioctl(number)))
        for cmd in UVM_IOCTLS.values():
            f.add_rule(sc.ALLOW, "ioctl", sc.Arg(1, sc.EQ, cmd))


def build(variant: str = "cpu") -> sc.SyscallFilter:
    """The CPU filter, or a GPU variant's DECIDE program (see the module docstring)."""
    if variant not in VARIANTS:
        raise ValueError(f"seccomp variant {variant!r}; variants: {VARIANTS}")
    gpu, audit = variant != "cpu", variant == "gpu-audit"
    f = _new(sc.TRAP if audit else sc.KILL_PROCESS)
    for name in ALLOW:
        f.add_rule(sc.ALLOW, name)
    for name, err in ERRNO_RULES.items():
        if not (gpu and name in OPEN_FLAGS_ARG):   # the GPU variants' opens: GATE decides by their flags
            f.add_rule(sc.ERRNO(err), name)
    # clone: threads only, never a namespace flag (fork, vfork and unshare-by-clone die).
    f.add_rule(sc.ALLOW, "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD | CLONE_NS_FLAGS, CLONE_THREAD))
    for name in ("mmap", "mprotect"):
        if gpu:   # an executable mapping is learned: GATE traps it
            f.add_rule(sc.ALLOW, name)
        else:
            f.add_rule(sc.ALLOW, name, sc.Arg(2, sc.MASKED_EQ, PROT_EXEC, 0))
            f.add_rule(sc.ERRNO(REFUSED), name, sc.Arg(2, sc.MASKED_EQ, PROT_EXEC, PROT_EXEC))
    _allowed_ioctls(f, variant)
    f.add_rule(sc.ERRNO(errno.ENOTTY), "ioctl", sc.Arg(1, sc.EQ, TCGETS))
    for cmd in FCNTLS:
        f.add_rule(sc.ALLOW, "fcntl", sc.Arg(1, sc.EQ, cmd))
    f.add_rule(sc.ALLOW, "memfd_create", sc.Arg(1, sc.MASKED_EQ, MFD_EXEC | MFD_HUGETLB, 0))
    if not gpu:
        return f
    forbidden_nv = {NVIDIA_UNLISTED[n] for n in NVIDIA_FORBIDDEN}
    for mask, value in aligned_blocks(set(range(256)) - forbidden_nv, 8):   # learned NVIDIA numbers (and the allowed)
        f.add_rule(sc.ALLOW, "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFF00 | mask, NV_TYPE | value))
    for mask, value in aligned_blocks(set(range(256)) - UVM_FORBIDDEN, 8):   # learned UVM numbers (and the allowed)
        f.add_rule(sc.ALLOW, "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFF00 | mask, value))
    for cmd in UVM_LEARNED_BEYOND:
        f.add_rule(sc.ALLOW, "ioctl", sc.Arg(1, sc.EQ, cmd))
    f.add_rule(sc.ALLOW, "prctl", sc.Arg(0, sc.EQ, PR_SET_NAME))
    for name in filter(_native, tuple(OPEN_FLAGS_ARG) + GPU_FILE_CALLS + GPU_LEARNED_CALLS):
        f.add_rule(sc.ALLOW, name)
    if audit:   # the default traps: what must still kill is named
        for name in filter(_native, FORBIDDEN_CALLS):
            f.add_rule(sc.KILL_PROCESS, name)
        for flag in _bits(CLONE_NS_FLAGS):
            f.add_rule(sc.KILL_PROCESS, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
        for number in forbidden_nv:
            f.add_rule(sc.KILL_PROCESS, "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFF, NV_TYPE | number))
        for number in UVM_FORBIDDEN:
            f.add_rule(sc.KILL_PROCESS, "ioctl", sc.Arg(1, sc.EQ, number))
    return f


def build_gate(variant: str) -> sc.SyscallFilter:
    """A GPU variant's GATE program: allows what the variant allows, traps (audit: logs) the rest.
    Loaded first, it lets DECIDE's own load through (seccomp is among what DECIDE kills)."""
    f = _new(sc.LOG if variant == "gpu-audit" else sc.TRAP)
    f.add_rule(sc.ALLOW, "seccomp", sc.Arg(0, sc.EQ, syscalls.SECCOMP_SET_MODE_FILTER))
    for name in tuple(ALLOW) + tuple(ERRNO_RULES) + ("clone", "fcntl", "memfd_create", "prctl") + GPU_FILE_CALLS:
        if _native(name) and name not in OPEN_FLAGS_ARG:
            f.add_rule(sc.ALLOW, name)
    for name in ("mmap", "mprotect"):
        f.add_rule(sc.ALLOW, name, sc.Arg(2, sc.MASKED_EQ, PROT_EXEC, 0))
    for name, arg in OPEN_FLAGS_ARG.items():
        if _native(name):
            f.add_rule(sc.ALLOW, name, sc.Arg(arg, sc.MASKED_EQ, WRITE_FLAGS, 0))
    _allowed_ioctls(f, variant)
    f.add_rule(sc.ALLOW, "ioctl", sc.Arg(1, sc.EQ, TCGETS))
    return f


def _bits(mask: int) -> list[int]:
    return [1 << i for i in range(mask.bit_length()) if mask >> i & 1]


def _bpf(f: sc.SyscallFilter) -> bytes:
    read_fd, write_fd = os.pipe()
    try:
        with os.fdopen(write_fd, "wb", closefd=True) as w:
            f.export_bpf(w)
        with os.fdopen(read_fd, "rb", closefd=False) as r:
            program = r.read()
    finally:
        os.close(read_fd)
    if not program or len(program) % 8:
        raise OSError(0, "libseccomp produced no BPF program")
    return program


@dataclasses.dataclass(frozen=True)
class Filter:
    """A variant as classic BPF, ready for `install`: its programs in their loading order (the CPU
    filter's one; a GPU variant's GATE, then DECIDE) and whether a call may trap (the worker then
    needs its handler)."""
    variant: str
    programs: tuple[bytes, ...]

    @property
    def traps(self) -> bool:
        return self.variant != "cpu"


@functools.lru_cache(maxsize=len(VARIANTS))
def compiled(variant: str = "cpu") -> Filter:
    """The variant's filter as classic BPF."""
    programs = (_bpf(build(variant)),)
    if variant != "cpu":
        programs = (_bpf(build_gate(variant)),) + programs
    return Filter(variant, programs)


def describe(nr: int, args: tuple[int, ...]) -> str:
    """A trapped call as an operator reads it: the call, and for an ioctl its command and name."""
    try:
        name = sc.resolve_syscall(sc.Arch.NATIVE, nr).decode()
    except ValueError:
        name = f"syscall {nr}"
    if name == "ioctl":
        cmd = args[1] & 0xFFFFFFFF
        if cmd & 0xFF00 == NV_TYPE:
            known = {v: k for k, v in {**NVIDIA_IOCTLS, **NVIDIA_UNLISTED}.items()}.get(cmd & 0xFF)
            return f"ioctl {cmd:#x} (NVIDIA {cmd & 0xFF}{f' {known}' if known else ''}, not on the filter's list)"
        known = {v: k for k, v in {**UVM_IOCTLS, **UVM_UNLISTED}.items()}.get(cmd)
        return f"ioctl {cmd:#x} ({f'UVM {cmd} {known}' if known else 'an unlisted command'}, not on the filter's list)"
    if name in ("mmap", "mprotect") and args[2] & PROT_EXEC:
        return f"{name} with PROT_EXEC (a library loaded after the filter: it belongs in the GPU warm-up)"
    if name in OPEN_FLAGS_ARG and args[OPEN_FLAGS_ARG[name]] & WRITE_FLAGS:
        return f"{name} with write flags {args[OPEN_FLAGS_ARG[name]] & WRITE_FLAGS:#o}"
    return name


def install(compiled_filter: Filter):
    """Load the filter's programs, arming the SIGSYS handler first where a call may trap
    (sigsys.arm); requires no_new_privs (set by privileges.drop)."""
    if compiled_filter.traps:
        sigsys.arm()
    for program in compiled_filter.programs:
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
    """Whether the GPU variants compile here (libseccomp takes their masked ioctl rules) and the
    SIGSYS handler that names a refused call is installed."""
    try:
        gpu, audit = compiled("gpu"), compiled("gpu-audit")
    except (OSError, RuntimeError, ValueError) as e:
        return f"unavailable: the GPU filter does not compile ({e})"
    if not sigsys.available():
        return "unavailable: the compiled SIGSYS handler (sandbox/sigsys.c) is not installed: rtd was installed without a compiler"
    return (f"compiles ({'+'.join(str(len(p) // 8) for p in gpu.programs)} BPF instructions: {len(NVIDIA_IOCTLS)} NVIDIA "
            f"ioctls by direction, type and number, {len(UVM_IOCTLS)} UVM ioctls, prctl PR_SET_NAME, "
            f"{'/'.join(filter(_native, OPEN_FLAGS_ARG))} read-only by flags and "
            f"{', '.join(filter(_native, GPU_FILE_CALLS)) or 'nothing else'} for NVRTC's headers; unlisted NVIDIA and "
            f"UVM ioctls, {len(GPU_LEARNED_CALLS)} harmless calls, executable mappings and writes refused with EPERM "
            f"and named, the rest killed; unsafe_gpu_audit: {'+'.join(str(len(p) // 8) for p in audit.programs)})")
