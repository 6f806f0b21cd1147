"""GPU memory budget, honest about what is enforced: the cgroup v2 `dmem` controller
(`dmem.max`, kernel-enforced) where the kernel and driver register a region; otherwise
the CuPy pool cap inside the worker is advisory only. The supervisor-side NVML
poll-and-kill watcher is not built: it cannot be exercised without a GPU and NVML, so
no layer claims it. With no GPU the worker simply gets no device nodes."""
import ctypes.util
import glob
import os

NO_GPU = "unavailable: no NVML/GPU"


def devices() -> list[str]:
    return sorted(glob.glob("/dev/nvidia[0-9]*") + glob.glob("/dev/dri/renderD*"))


def nvml() -> str | None:
    """The NVML library the loader would find (None without the NVIDIA driver's userspace)."""
    return ctypes.util.find_library("nvidia-ml")


def dmem_regions(layout) -> list[str]:
    """Regions listed in dmem.capacity of the v2 root (empty without the controller)."""
    if not layout.v2_root:
        return []
    try:
        with open(os.path.join(layout.v2_root, "dmem.capacity")) as f:
            return [line.split()[0] for line in f if line.strip()]
    except OSError:
        return []


def status(layout, gpu_memory_bytes: int) -> str:
    if not devices():
        return NO_GPU
    if gpu_memory_bytes == 0:
        return "enforced (no GPU access: the worker's root has no device nodes)"
    if dmem_regions(layout):
        return "unavailable: dmem regions present but rtd does not yet bind devices into the worker"
    return "advisory (no dmem region: CuPy pool cap only, bypassable; no NVML poll-and-kill watcher)"


def cap_cupy_pool(gpu_memory_bytes: int) -> str:
    """Inside the worker before confinement: cap CuPy's pool when CuPy is loaded (advisory)."""
    import sys
    cupy = sys.modules.get("cupy")
    if cupy is None or gpu_memory_bytes == 0:
        return "not loaded"
    cupy.get_default_memory_pool().set_limit(size=gpu_memory_bytes)
    return "advisory"
