"""Resource limits: no core dumps, few fds, bounded file size, bounded processes (per uid;
the kernel ignores NPROC for root, so it bites only after the uid switch); and the normal
scheduling priority, whatever the daemon that forked it runs at (the supervisor runs above its
tenants, config.supervisor_nice; RLIMIT_NICE 0 keeps a tenant from raising its own)."""
import os
import resource

TENANT_NICE = 0   # every tenant process's scheduling priority (the supervisor's is config.supervisor_nice)


def apply(limits):
    os.setpriority(os.PRIO_PROCESS, 0, TENANT_NICE)
    pairs = {resource.RLIMIT_CORE: 0, resource.RLIMIT_NICE: 0, resource.RLIMIT_NOFILE: limits.nofile,
             resource.RLIMIT_FSIZE: limits.fsize_bytes, resource.RLIMIT_NPROC: limits.pids}
    pairs = {which: (value, value) for which, value in pairs.items()}
    if limits.cpu_seconds:   # SIGXCPU at the soft limit names the layer; SIGKILL a second later
        pairs[resource.RLIMIT_CPU] = (limits.cpu_seconds, limits.cpu_seconds + 1)
    for which, value in pairs.items():
        resource.setrlimit(which, value)
        if resource.getrlimit(which) != value:
            raise OSError(0, f"rlimit {which} did not take")
