"""Resource limits: no core dumps, few fds, bounded file size, bounded processes (per uid;
the kernel ignores NPROC for root, so it bites only after the uid switch)."""
import resource


def apply(limits):
    pairs = {resource.RLIMIT_CORE: 0, resource.RLIMIT_NOFILE: limits.nofile,
             resource.RLIMIT_FSIZE: limits.fsize_bytes, resource.RLIMIT_NPROC: limits.pids}
    if limits.cpu_seconds:
        pairs[resource.RLIMIT_CPU] = limits.cpu_seconds
    for which, value in pairs.items():
        resource.setrlimit(which, (value, value))
        if resource.getrlimit(which) != (value, value):
            raise OSError(0, f"rlimit {which} did not take")
