"""The GPU as a worker gets it: which NVIDIA device nodes and driver libraries a worker
whose policy grants GPUs finds in its root (from a configurable device root and library
directories), and the function that initialises CUDA in the worker before its seccomp
filter. Which layer limits a tenant's GPU memory is sandbox/gpu_memory.py's.

What a CUDA compute process needs, after NVIDIA's container toolkit (libnvidia-container,
src/nvc_info.c and nvc_mount.c: the "compute" and "utility" capabilities):
  /dev/nvidiactl   the resource manager's control node: every RM client, object and memory
                   call (NV_ESC_RM_*), GPU enumeration (NV_ESC_CARD_INFO); major 195, minor 255
  /dev/nvidiaN     one per GPU (major 195, minor N): attaching it to the client, mapping its
                   memory and doorbells (mmap of the node)
  /dev/nvidia-uvm  the unified-memory driver (its own major, in /proc/devices): CUDA opens it
                   in every context for the GPU virtual address space; cuInit fails without it
Not granted: nvidia-uvm-tools (the profiler's event queues, which observe other processes),
nvidia-modeset and /dev/dri (display, graphics), nvidia-caps/ (MIG instance capabilities:
rtd grants whole GPUs only), other GPUs' nodes. CUDA enumerates the GPUs through nvidiactl
and skips those whose node it cannot open, so inside the worker the granted GPUs are
devices 0..n-1 whatever their host numbers; the nodes, not CUDA_VISIBLE_DEVICES, isolate.

With no GPU granted the worker's root has no device node at all.

Headers. CuPy compiles a model's kernels with NVRTC when the model loads, which in a spare
worker is after its seccomp filter, and NVRTC opens the headers they #include at every
compile. Where CuPy points it (cupy/_core/core.pyx, assemble_cupy_compiler_options, CuPy 14):
-I<cupy>/_core/include (and its cupy/_cccl/{cub,thrust,libcudacxx}), and -I the directory
cuda-pathfinder's find_nvidia_header_directory("cudart") names (a pip wheel's nvidia/cu13/include
or nvidia/cuda_runtime/include, conda's, $CUDA_PATH's or $CUDA_HOME's include, a system
toolkit's). The grant binds those directories read-only at their host paths, so the absolute
-I options CuPy builds inside the worker name the same files.

The driver gate (as gVisor's nvproxy has one): the GPU filter's ioctl numbers come from NVIDIA's
headers of particular releases, so a GPU worker starts only on a driver whose release is on the
known-good list (policies/nvidia_drivers.toml, written by scripts/check_nvidia_ioctls.py); on
any other it is refused in one line, unless the tenant's policy sets unsafe_gpu_audit (the
audit filter: seccomp)."""
import dataclasses
import functools
import glob
import importlib.resources
import importlib.util
import os
import re
import site
import stat
import subprocess
import tomllib
from typing import Callable

from rtd.errors import Code, RtdError

NVIDIA_MAJOR = 195          # "nvidia-frontend" in /proc/devices: nvidiaN (minor N) and nvidiactl
CTL_MINOR = 255
CTL, UVM = "nvidiactl", "nvidia-uvm"
# The driver's user-space libraries a CUDA compute process loads (libnvidia-container's
# compute_libs and utility_libs, less OpenCL, the debugger, video and PKCS#11):
LIBRARY_STEMS = (
    "libcuda.so",                    # the CUDA driver API (what CuPy's runtime calls into)
    "libnvidia-ptxjitcompiler.so",   # PTX to SASS, loaded by libcuda for NVRTC's PTX
    "libnvidia-nvvm.so",             # NVVM, loaded by libcuda for LTO-IR and by newer NVRTC paths
    "libnvidia-gpucomp.so",          # the shared compiler library the PTX JIT links (drivers >= 545)
    "libnvidia-fatbinaryloader.so",  # fat binaries (drivers before 450; absent on newer ones)
    "libnvidia-ml.so",               # NVML (nvidia-ml-py, CuPy's device queries)
)
CUDA_INIT = "rtd.kernels.backend_cupy:init_device"   # init_device(device_ordinals, memory_limit)
CUDA_HEADER = "cuda_runtime.h"   # what cuda-pathfinder looks for to name CUDA's include directory ("cudart")
# Without cuda-pathfinder (CuPy before 14): the places its "cudart" search and CuPy 13's
# get_cuda_path() cover, every one that holds CUDA_HEADER.
CUDA_HEADER_ENV = ("CUDA_PATH", "CUDA_HOME")
CUDA_HEADER_WHEELS = ("nvidia/cu13/include", "nvidia/cuda_runtime/include")
CUDA_HEADER_SYSTEM = "/usr/local/cuda/include"
DRIVER_VERSION = "/sys/module/nvidia/version"   # the loaded kernel module's version, e.g. "570.86.15"


@dataclasses.dataclass(frozen=True)
class Driver:
    """Where this host's GPU pieces are: its device nodes (under `dev_root`), the driver's
    libraries (in `lib_dirs`; None: wherever the ldconfig cache finds them), the function,
    `module:function`, that initialises the GPU inside a worker, and the header directories
    its kernels compile against (`include_dirs`; None: CuPy's and CUDA's, see header_dirs), and
    the file that holds the loaded driver's version (`version_file`)."""
    dev_root: str = "/dev"
    lib_dirs: tuple[str, ...] | None = None
    init: str = CUDA_INIT
    include_dirs: tuple[str, ...] | None = None
    version_file: str = DRIVER_VERSION


DRIVER = Driver()


@dataclasses.dataclass(frozen=True)
class Grant:
    """What one GPU worker gets: its GPUs' host indices and memory budget, the device nodes
    (host paths; bound at /dev/<name> in the worker), the driver libraries (canonical host
    paths, bound read-only at the same paths), its GPU initialiser, and the header
    directories NVRTC reads (absolute host paths, bound read-only and noexec at the same paths)."""
    ordinals: tuple[int, ...]
    memory_bytes: int
    nodes: tuple[str, ...]
    libraries: tuple[str, ...]
    init: str
    headers: tuple[str, ...]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data) -> "Grant":
        """A grant from the zygote's arm request; E_CONTAINMENT unless it has exactly this shape."""
        scalars = {"memory_bytes": int, "init": str}
        lists = {"ordinals": int, "nodes": str, "libraries": str, "headers": str}
        if not (isinstance(data, dict) and data.keys() == scalars.keys() | lists.keys()
                and all(type(data[k]) is t for k, t in scalars.items())
                and all(type(data[k]) is list and all(type(v) is t for v in data[k]) for k, t in lists.items())):
            raise RtdError(Code.E_CONTAINMENT, f"malformed GPU grant: {data!r:.80}")
        return cls(tuple(data["ordinals"]), data["memory_bytes"], tuple(data["nodes"]),
                   tuple(data["libraries"]), data["init"], tuple(data["headers"]))


def uvm_major() -> int | None:
    """nvidia-uvm's major as the loaded driver registered it (None: not loaded)."""
    with open("/proc/devices") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2 and parts[1] == UVM:
                return int(parts[0])
    return None


def _is_char(path: str, major: int | None, minor: int | None = None) -> bool:
    """A character device with this major (None: any, where the driver is not loaded) and minor."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return (stat.S_ISCHR(st.st_mode) and (major is None or os.major(st.st_rdev) == major)
            and (minor is None or os.minor(st.st_rdev) == minor))


def device_nodes(ordinals: tuple[int, ...], dev_root: str = "/dev") -> tuple[str, ...]:
    """The host paths of the nodes a worker with these GPUs gets: nvidiactl, nvidia-uvm, each
    nvidiaN. A node that is missing or not the driver's device refuses the worker
    (E_LAYER_UNAVAILABLE): a granted GPU the host lacks is never silently dropped."""
    wanted = [(CTL, NVIDIA_MAJOR, CTL_MINOR, "the NVIDIA control node"),
              (UVM, uvm_major(), None, "the unified-memory node")]
    wanted += [(f"nvidia{n}", NVIDIA_MAJOR, n, f"GPU {n}, granted by the policy") for n in ordinals]
    nodes = []
    for name, major, minor, what in wanted:
        path = os.path.join(dev_root, name)
        if not _is_char(path, major, minor):
            number = f"{major if major is not None else '*'}:{minor if minor is not None else '*'}"
            raise RtdError(Code.E_LAYER_UNAVAILABLE, f"gpu: {path} ({what}) is not a character device "
                                                     f"{number} on this host")
        nodes.append(path)
    return tuple(nodes)


@functools.lru_cache(maxsize=1)
def _ldconfig_cache() -> tuple[str, ...]:
    """The native-architecture library paths in the dynamic loader's cache (`ldconfig -p`)."""
    try:
        listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=30,
                                 env={"PATH": "/usr/sbin:/sbin:/usr/bin:/bin", "LC_ALL": "C"}).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    arch = {"x86_64": "x86-64", "aarch64": "AArch64"}.get(os.uname().machine, "")
    return tuple(m.group(2) for m in re.finditer(r"^\s*\S+ \(([^)]*)\) => (\S+)$", listing, re.M)
                 if arch in m.group(1).split(","))


def driver_libraries(lib_dirs: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The driver's libraries on this host (LIBRARY_STEMS: every version name and link), as
    canonical paths (directory resolved, the file's own name kept, so a soname link stays a
    link); from `lib_dirs` when given, else from the ldconfig cache. Empty without a driver."""
    if lib_dirs is None:
        found = [p for p in _ldconfig_cache() if os.path.basename(p).startswith(LIBRARY_STEMS)]
    else:
        found = [p for d in lib_dirs for stem in LIBRARY_STEMS for p in glob.glob(os.path.join(d, stem + "*"))]
    canonical = {os.path.join(os.path.realpath(os.path.dirname(p)), os.path.basename(p)) for p in found}
    return tuple(sorted(p for p in canonical if os.path.isfile(p)))


def cupy_header_dir() -> str | None:
    """CuPy's own include directory (<cupy>/_core/include: CuPy's core module's
    _get_header_dir_path), found from where the package lies: CuPy is not imported (that
    would load CUDA's libraries in a process that forks workers). None without CuPy."""
    try:
        spec = importlib.util.find_spec("cupy")
    except (ImportError, ValueError):
        return None
    for where in (spec.submodule_search_locations or ()) if spec else ():
        path = os.path.join(os.path.abspath(where), "_core", "include")
        if os.path.isdir(path):
            return path
    return None


def cuda_header_dirs() -> tuple[str, ...]:
    """CUDA's include directories CuPy's compile names: cuda-pathfinder's answer where it is
    installed (what CuPy 14 asks; importing it loads no CUDA library), else every directory of
    the older search (CUDA_HEADER_ENV's include, the wheels', CUDA_HEADER_SYSTEM) holding CUDA_HEADER."""
    try:
        from cuda.pathfinder import find_nvidia_header_directory
    except ImportError:
        pass
    else:
        found = find_nvidia_header_directory("cudart")
        return (found,) if found else ()
    roots = [os.path.join(os.environ[v], "include") for v in CUDA_HEADER_ENV if os.environ.get(v)]
    roots += [os.path.join(sp, w) for sp in site.getsitepackages() for w in CUDA_HEADER_WHEELS] + [CUDA_HEADER_SYSTEM]
    return tuple(dict.fromkeys(os.path.abspath(r) for r in roots if os.path.isfile(os.path.join(r, CUDA_HEADER))))


@functools.lru_cache(maxsize=1)
def _found_header_dirs() -> tuple[str, ...]:
    """CuPy's and CUDA's header directories on this host; E_LAYER_UNAVAILABLE when either is missing."""
    cupy_dir = cupy_header_dir()
    if cupy_dir is None:
        raise RtdError(Code.E_LAYER_UNAVAILABLE, "gpu: no CuPy include directory (is the cupy package installed?)")
    cuda_dirs = cuda_header_dirs()
    if not cuda_dirs:
        raise RtdError(Code.E_LAYER_UNAVAILABLE, f"gpu: no CUDA headers ({CUDA_HEADER}) where CuPy looks: install "
                                                 "CUDA's headers (cupy-cuda13x[ctk]) or set CUDA_PATH")
    return (cupy_dir,) + cuda_dirs


def header_dirs(include_dirs: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The header directories a GPU worker gets: `include_dirs` when given, else CuPy's and
    CUDA's (E_LAYER_UNAVAILABLE when either is missing). Each must be an absolute directory."""
    dirs = _found_header_dirs() if include_dirs is None else tuple(include_dirs)
    for d in dirs:
        if not (os.path.isabs(d) and os.path.isdir(d)):
            raise RtdError(Code.E_LAYER_UNAVAILABLE, f"gpu: header directory {d} is not an absolute directory")
    return tuple(os.path.normpath(d) for d in dirs)


@functools.cache
def known_drivers() -> frozenset[str]:
    """The driver releases the GPU filter's ioctl numbers were checked against (policies/nvidia_drivers.toml)."""
    text = importlib.resources.files("rtd.policies").joinpath("nvidia_drivers.toml").read_text()
    return frozenset(tomllib.loads(text)["versions"])


def driver_version(version_file: str = DRIVER_VERSION) -> str | None:
    """The loaded NVIDIA kernel module's version (None: no module, or a file that says nothing sensible)."""
    try:
        with open(version_file) as f:
            version = f.read(64).strip()
    except OSError:
        return None
    return version if re.fullmatch(r"\d+\.\d+(\.\d+)?", version) else None


def check_driver(version: str | None, audit: bool) -> str:
    """The driver gate: "known", or "audit" where the policy's unsafe_gpu_audit lets an unknown
    driver run under the audit filter; E_LAYER_UNAVAILABLE otherwise."""
    if version in known_drivers():
        return "known"
    if audit:
        return "audit"
    raise RtdError(Code.E_LAYER_UNAVAILABLE, f"gpu: NVIDIA driver {version or '(version unreadable)'} is not on the "
                                             "GPU filter's known-good list (policies/nvidia_drivers.toml): its ioctl "
                                             "numbers are unchecked; unsafe_gpu_audit runs it under the audit filter")


def driver_status(version_file: str = DRIVER_VERSION) -> str:
    """For rtctl doctor: the loaded driver's release and what the gate does with it."""
    version = driver_version(version_file)
    if version is None:
        return "unavailable: no NVIDIA kernel module loaded (no version in " + version_file + ")"
    if version in known_drivers():
        return f"enforced ({version}: on the known-good list, policies/nvidia_drivers.toml; ioctl numbers checked against its headers)"
    return (f"refuses ({version}: not on the known-good list: GPU tenants' workers are refused unless their policy "
            "sets unsafe_gpu_audit, which runs them under the audit filter)")


def grant(limits, driver: Driver = DRIVER, audit: bool = False) -> Grant | None:
    """The worker's GPU grant under `limits` (None when it names no GPU); E_LAYER_UNAVAILABLE
    when a node is missing, the host has no libcuda, a header directory is missing, or the
    driver is not known-good and `audit` (the policy's unsafe_gpu_audit) is off."""
    if not limits.gpu_devices:
        return None
    nodes = device_nodes(limits.gpu_devices, driver.dev_root)
    libraries = driver_libraries(driver.lib_dirs)
    if not any(os.path.basename(p).startswith("libcuda.so") for p in libraries):
        where = ", ".join(driver.lib_dirs) if driver.lib_dirs is not None else "the ldconfig cache"
        raise RtdError(Code.E_LAYER_UNAVAILABLE, f"gpu: no libcuda.so (the NVIDIA driver's user space) in {where}")
    check_driver(driver_version(driver.version_file), audit)
    return Grant(tuple(limits.gpu_devices), limits.gpu_memory_bytes, nodes, libraries, driver.init,
                 header_dirs(driver.include_dirs))


def initializer(name: str) -> Callable:
    """Launcher side, before the fork: the GPU initialiser `module:function`, imported now
    (after pivot_root the worker can import nothing). E_LAYER_UNAVAILABLE when it is not there."""
    module, _, attr = name.partition(":")
    try:
        fn = getattr(importlib.import_module(module), attr, None)
    except ImportError as e:
        raise RtdError(Code.E_LAYER_UNAVAILABLE, f"gpu: cannot import {module} ({e})") from None
    if not callable(fn):
        raise RtdError(Code.E_LAYER_UNAVAILABLE, f"gpu: {module} defines no {attr}() to initialise the GPU")
    return fn


def devices(dev_root: str = "/dev") -> list[str]:
    """The NVIDIA nodes under `dev_root`: nvidiactl, nvidia-uvm and each GPU's nvidiaN."""
    if not os.path.isdir(dev_root):
        return []
    names = [CTL, UVM] + [n for n in os.listdir(dev_root) if re.fullmatch(r"nvidia\d+", n)]
    return sorted(os.path.join(dev_root, n) for n in names if os.path.exists(os.path.join(dev_root, n)))
