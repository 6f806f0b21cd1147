"""Which GPU memory limit holds a tenant's workers on this host, strongest first, and what
each does not cover:

1. cgroup v2 `dmem.max` on the tenant's node, where the v2 root's `dmem.capacity` lists a
   region of every GPU the tenant names (the kernel refuses the allocation; NVIDIA's
   driver may register no region at all, so nothing depends on it);
2. otherwise the supervisor's NVML watcher (daemon/gpu_watch.py): per-process used memory
   polled every few ms, the tenant's worker killed once the sum is over budget —
   detection, not prevention — plus CuPy's pool cap inside the worker, which raw
   cudaMalloc bypasses.

NVIDIA MPS (`CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`, a per-client cap) and MIG are detected and
reported, never counted: an MPS client needs the daemon's pipe directory
(`CUDA_MPS_PIPE_DIRECTORY`, default /tmp/nvidia-mps) inside its mount namespace, which a
worker's root does not hold, and rtd's policy names whole GPUs (/dev/nvidiaN), not MIG
instances (the doctor's NVML row says which GPUs are in MIG mode). rtd never changes a
host's MIG or MPS settings. GPUs are named by their /dev/nvidiaN number
(the driver's minor number); /proc/driver/nvidia/gpus/<bus>/information maps it to the PCI
bus a dmem region is named after ("drm/<bus>/vram0")."""
import ctypes.util
import dataclasses
import functools
import glob
import os
import stat

PROC_GPUS = "/proc/driver/nvidia/gpus"
MPS_DEFAULT_PIPE_DIRECTORY = "/tmp/nvidia-mps"
WATCH_INTERVAL_S = 0.005   # the watcher's poll period: within the 10 ms the design promises
NO_GPU = "enforced (no GPU: the worker's root has no GPU device nodes)"
WATCHER_GAP = ("detection, not prevention: between two polls a worker can allocate past its budget "
               "and another tenant on the same GPU can hit out-of-memory")


@dataclasses.dataclass(frozen=True)
class GpuLimit:
    """The limit in force for one policy: `layer` is "none" (no GPU), "dmem", "watcher" or
    "unavailable"; `state` is the doctor's line for it; `dmem_max` the lines for the tenant
    node's dmem.max. The supervisor's NVML watcher, where NVML loads, polices every GPU
    tenant's sum whatever the layer."""
    layer: str
    state: str
    dmem_max: tuple[str, ...] = ()


def dmem_capacity(v2_root: str | None) -> dict[str, int]:
    """Region -> bytes from the v2 root's dmem.capacity (empty without the controller or a region)."""
    if not v2_root:
        return {}
    try:
        with open(os.path.join(v2_root, "dmem.capacity")) as f:
            rows = [line.split() for line in f if line.strip()]
    except OSError:
        return {}
    return {row[0]: int(row[1]) for row in rows if len(row) == 2 and row[1].isdigit()}


def gpu_buses(proc_root: str = PROC_GPUS) -> dict[int, str]:
    """/dev/nvidiaN number -> PCI bus id ("0000:01:00.0"), from the NVIDIA driver's proc files."""
    buses = {}
    for info in glob.glob(os.path.join(proc_root, "*", "information")):
        try:
            with open(info) as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        minor = fields.get("Device Minor", "").strip()
        if minor.isdigit():
            buses[int(minor)] = os.path.basename(os.path.dirname(info)).lower()
    return buses


def dmem_regions(devices: tuple[int, ...], capacity: dict[str, int], buses: dict[int, str]) -> dict[int, list[str]]:
    """GPU -> its dmem regions (named "<subsystem>/<bus>/<region>"); GPUs without one are left out."""
    out = {}
    for device in devices:
        bus = buses.get(device)
        regions = sorted(r for r in capacity if bus and r.split("/")[1:2] == [bus])
        if regions:
            out[device] = regions
    return out


def mps_pipe_directory(environ=os.environ) -> str | None:
    """The MPS control daemon's pipe directory when one runs (its `control` socket or FIFO is
    there): reported, not used (see the module docstring)."""
    directory = environ.get("CUDA_MPS_PIPE_DIRECTORY") or MPS_DEFAULT_PIPE_DIRECTORY
    try:
        mode = os.stat(os.path.join(directory, "control")).st_mode
    except OSError:
        return None
    return directory if stat.S_ISSOCK(mode) or stat.S_ISFIFO(mode) else None


def host_gpus(dev_root: str = "/dev") -> tuple[int, ...]:
    """The /dev/nvidiaN numbers present."""
    names = (os.path.basename(p)[len("nvidia"):] for p in glob.glob(os.path.join(dev_root, "nvidia[0-9]*")))
    return tuple(sorted(int(n) for n in names if n.isdigit()))


def host_statement(v2_root: str | None, v2_writable: bool) -> str:
    """For rtctl doctor: the limit a tenant naming this host's GPUs would get, and what it does not cover."""
    gpus = host_gpus()
    if not gpus:
        return "unavailable: no GPU on this host (no /dev/nvidiaN)"
    return plan(gpus, 0, v2_root, v2_writable).state


@functools.cache
def nvml_library() -> str | None:
    """The NVML library the loader would find (None without the NVIDIA driver's userspace);
    cached: the launcher plans every spawn, and the answer does not change while it runs."""
    return ctypes.util.find_library("nvidia-ml")


def plan(devices: tuple[int, ...], budget: int, v2_root: str | None, v2_writable: bool, dev_root: str = "/dev",
         proc_root: str = PROC_GPUS, environ=os.environ) -> GpuLimit:
    """The strongest GPU memory limit this host offers a tenant naming GPUs `devices`
    (policy limits.gpu_devices) with `budget` bytes (limits.gpu_memory_bytes; 0 for the
    doctor's statement about any such tenant)."""
    amount = f"{budget} bytes" if budget else "the tenant's gpu_memory_bytes"
    if not devices:
        return GpuLimit("none", NO_GPU)
    missing = [d for d in devices if not os.path.exists(os.path.join(dev_root, f"nvidia{d}"))]
    if missing:
        return GpuLimit("unavailable", f"unavailable: no GPU {missing[0]} on this host "
                                       f"({os.path.join(dev_root, f'nvidia{missing[0]}')} missing)")
    regions = dmem_regions(devices, dmem_capacity(v2_root), gpu_buses(proc_root))
    if v2_writable and len(regions) == len(devices):
        lines = tuple(f"{r} {budget}" for d in devices for r in regions[d])
        return GpuLimit("dmem", f"enforced (cgroup v2 dmem.max {amount} on each of the tenant's GPU regions "
                                f"({', '.join(r for d in devices for r in regions[d])}): the kernel refuses the "
                                f"allocation; with several GPUs the tenant may hold the budget on each)",
                        dmem_max=lines)
    pipes = mps_pipe_directory(environ)
    unused = (f"; NVIDIA MPS runs at {pipes} but is not used: a worker's root does not hold its pipe directory, "
              "so CUDA_MPS_PINNED_DEVICE_MEM_LIMIT would not bind it") if pipes else ""
    if nvml_library():
        return GpuLimit("watcher", f"enforced (NVML watcher: the tenant's workers' GPU memory polled every "
                                   f"{WATCH_INTERVAL_S * 1000:g} ms, a worker killed once the sum passes {amount}; "
                                   f"{WATCHER_GAP}; CuPy's pool cap gives the clean error first{unused})")
    return GpuLimit("watcher", f"advisory (CuPy's pool cap only: raw cudaMalloc bypasses it; no dmem region "
                               f"and no NVML library for the watcher{unused})")

