"""What this host actually enforces: kernel, cgroup layout and controllers, which cgroup
hierarchies rtd may write, user namespaces, seccomp, dmem and GPU, per policy which
layers a worker would get, and whether the executor runs its compiled CPU kernels."""
import importlib.machinery
import importlib.util
import os

from rtd.sandbox import cgroup, gpu, gpu_memory, namespaces, seccomp, syscalls
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
    v2_kill = layout.v2_root and layout.writable("v2", policy.cgroup_parent) and _kernel_at_least(5, 14)
    layers["kill"] = cgroup.KILL_BY_CGROUP if v2_kill else cgroup.KILL_BY_PID1
    v2_writable = bool(layout.v2_root) and root and layout.writable("v2", policy.cgroup_parent)
    layers["gpu"] = gpu_memory.plan(policy.limits.gpu_devices, policy.limits.gpu_memory_bytes, layout.v2_root,
                                    v2_writable).state
    layers["rlimits"] = "enforced (core 0, nice 0, nofile, fsize, nproc" + (", cpu)" if policy.limits.cpu_seconds else ")")
    layers["privileges"] = ("enforced (own uid/gid, no capabilities, no_new_privs, new session, fds closed)"
                            if root else need_root)
    layers["seccomp"] = ("disabled by policy (unsafe_disable_seccomp)" if policy.unsafe_disable_seccomp
                         else seccomp.status())
    return layers


def _kernel_at_least(major: int, minor: int) -> bool:
    parts = os.uname().release.split(".")
    return (int(parts[0]), int(parts[1].split("-")[0])) >= (major, minor)


def host_report() -> dict:
    """The host as rtd sees it; cgroup.writable: for each hierarchy rtd uses, where the
    default policy's workers go (<base>) and whether this process may create them there."""
    layout, policy = cgroup.detect_layout(), load_policy()
    return {
        "kernel": os.uname().release,
        "architecture": syscalls.architecture_status(),
        "root": os.geteuid() == 0,
        "cgroup": {"mode": layout.mode, "v2_root": layout.v2_root,
                   "v2_controllers": sorted(layout.v2_controllers), "v1_controllers": dict(layout.v1_roots),
                   "writable": {h: {"base": layout.base(h, policy.cgroup_parent),
                                    "writable": layout.writable(h, policy.cgroup_parent)}
                                for h in layout.hierarchies()},
                   "favordynmods": cgroup.favordynmods_status()},
        "userns": namespaces.userns_status(),
        "seccomp": seccomp.status(),
        "dmem": sorted(gpu_memory.dmem_capacity(layout.v2_root)) or "unavailable: no dmem controller or region",
        "gpu": gpu.devices() or "unavailable: no NVIDIA device nodes in /dev",
        "gpu_libraries": list(gpu.driver_libraries()) or "unavailable: no NVIDIA driver library in the ldconfig cache",
        "gpu_seccomp": seccomp.gpu_status(),
        "gpu_driver": gpu.driver_status(),
        "nvml": gpu_memory.nvml_library() or "unavailable: no libnvidia-ml",
        "mps": (f"runs at {gpu_memory.mps_pipe_directory()}: not used as a limit (workers' roots do not hold its pipe "
                "directory)") if gpu_memory.mps_pipe_directory() else "unavailable: no MPS control daemon",
        "gpu_memory_limit": gpu_memory.host_statement(layout.v2_root, os.geteuid() == 0 and bool(layout.v2_root)
                                                      and layout.writable("v2", policy.cgroup_parent)),
        "layers": plan_layers(policy, layout),
        "cpu_kernels": _cpu_kernels(),
    }


def _cpu_kernels() -> str:
    """Which executor kernels the workers run: "compiled" (kernels/native, built at install) or
    "numpy". Read from the installed files: importing the executor to ask would cost doctor
    seconds (NumPy, SciPy, every op), and a library that is there is the one it loads."""
    spec = importlib.util.find_spec("rtd.kernels")   # found, not imported
    folders = spec.submodule_search_locations if spec is not None else []
    found = any(os.path.exists(os.path.join(folder, "native", "_compiled" + suffix))
                for folder in folders for suffix in importlib.machinery.EXTENSION_SUFFIXES)
    return "compiled" if found else "numpy"
