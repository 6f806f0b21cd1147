"""What this host actually enforces: kernel, cgroup layout and controllers, user
namespaces, seccomp, dmem and GPU, and per policy which layers a worker would get."""
import os

from rtd.sandbox import cgroup, gpu, namespaces, seccomp
from rtd.sandbox.policy import load_policy


def plan_layers(policy, layout=None) -> dict[str, str]:
    """Layer -> "enforced (...)" | "advisory (...)" | "disabled by policy (...)" | "unavailable: reason"."""
    layout = layout or cgroup.detect_layout()
    root = os.geteuid() == 0
    need_root = "unavailable: the launcher is not root"
    layers = {
        "userns": ("disabled by policy (disable_userns)" if policy.disable_userns else namespaces.userns_status()),
        "namespaces": "enforced (pid, mount, net, ipc, uts, cgroup)" if root else need_root,
        "mounts": "enforced (pivot_root to a read-only tmpfs, noexec binds, capped /scratch, own /proc)"
                  if root else need_root,
    }
    for r in cgroup.RESOURCES:
        layers[r] = layout.describe(r) if root else need_root
    layers["kill"] = ("enforced (cgroup v2 cgroup.kill)" if layout.v2_root and _kernel_at_least(5, 14)
                      else "enforced (SIGKILL to the namespace's pid 1)")
    layers["gpu"] = gpu.status(layout, policy.limits.gpu_memory_bytes)
    layers["rlimits"] = "enforced (core 0, nofile, fsize, nproc" + (", cpu)" if policy.limits.cpu_seconds else ")")
    layers["privileges"] = ("enforced (own uid/gid, no capabilities, no_new_privs, new session, fds closed)"
                            if root else need_root)
    layers["seccomp"] = ("disabled by policy (unsafe_disable_seccomp)" if policy.unsafe_disable_seccomp
                         else seccomp.status())
    return layers


def _kernel_at_least(major: int, minor: int) -> bool:
    parts = os.uname().release.split(".")
    return (int(parts[0]), int(parts[1].split("-")[0])) >= (major, minor)


def host_report() -> dict:
    layout = cgroup.detect_layout()
    return {
        "kernel": os.uname().release,
        "root": os.geteuid() == 0,
        "cgroup": {"mode": layout.mode, "v2_root": layout.v2_root,
                   "v2_controllers": sorted(layout.v2_controllers), "v1_controllers": dict(layout.v1_roots),
                   "favordynmods": cgroup.favordynmods_status()},
        "userns": namespaces.userns_status(),
        "seccomp": seccomp.status(),
        "dmem": gpu.dmem_regions(layout) or "unavailable: no dmem controller or region",
        "gpu": gpu.devices() or gpu.NO_GPU,
        "nvml": gpu.nvml() or "unavailable: no libnvidia-ml",
        "layers": plan_layers(load_policy(), layout),
    }
