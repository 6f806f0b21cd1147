"""A GPU tenant's worker, confined for real on a host without a GPU: a fake device root of
real character devices (os.mknod with NVIDIA's majors), a fake driver library directory and
version file stand for the host's /dev and driver, and a stand-in initialiser, run by the
worker exactly where CUDA's would be (after the mounts, before privileges and seccomp),
records what the worker sees. The GPU filter's decisions are the calls' own, made in the
confined worker: NVIDIA's ioctl numbers on a memfd (the kernel answers ENOTTY when the filter
lets one by), the learned calls (EPERM, and the SIGSYS handler's record naming them), the
forbidden ones (the kill). What it cannot show here (CUDA itself initialising in that root,
the calls it makes after the filter) needs a GPU host: see bench/gpu_check.sh.

The fake root lives in /var/tmp, not /tmp: the worker's new root is a tmpfs mounted over /tmp
in its mount namespace, which would hide a source there."""
import ctypes
import dataclasses
import errno
import importlib.util
import json
import mmap
import os
import shutil
import signal
import threading

import platform

import pyseccomp
import pytest
from sandbox_workers import fake_gpu_driver, proc_status, start_echo, stop

from rtd.errors import Code, RtdError
from rtd.sandbox import SandboxKilled, TenantIdentity, gpu, load_policy, run_confined, seccomp, sigsys
from rtd.sandbox.escapes import OBSERVED
from rtd.sandbox.syscalls import libc
from rtd.sandbox.zygote import Zygote

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="device nodes (mknod) and confined workers need root"),
              pytest.mark.usefixtures("no_cgroup_leftovers")]
BUDGET = 1 << 30
GPU1 = load_policy({"limits": {"gpu_devices": [1], "gpu_memory_bytes": BUDGET}})
CPU = load_policy()
AUDIT1 = load_policy({"unsafe_gpu_audit": True, "limits": {"gpu_devices": [1], "gpu_memory_bytes": BUDGET}})
KNOWN_DRIVER = "570.86.15"   # on policies/nvidia_drivers.toml
SEEN: dict = {}   # what the stand-in initialiser saw, in the worker (read back by the worker's target)
PROT_EXEC_READ = mmap.PROT_READ | mmap.PROT_EXEC


def _errno_of(fn, *args) -> str:
    try:
        fn(*args)
    except OSError as e:
        return errno.errorcode[e.errno]
    return "ok"


def _open_close(path: str, flags: int):
    os.close(os.open(path, flags | os.O_CLOEXEC))


def _map_exec(path: str):
    """Map the file PROT_EXEC, as the dynamic loader maps a library's code; kept, as libcuda's would be."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        SEEN.setdefault("mappings", []).append(mmap.mmap(fd, 4096, mmap.MAP_PRIVATE, PROT_EXEC_READ))
    finally:
        os.close(fd)


def stand_in_init(ordinals, memory_bytes):
    """Where CUDA's initialiser runs in a GPU worker: record /dev, what opens, the mounts, and
    whether the driver's libraries map as code (the /usr bind does not: noexec)."""
    SEEN["args"] = [list(ordinals), memory_bytes]
    SEEN["dev"] = sorted(os.listdir("/dev"))
    SEEN["open"] = {name: _errno_of(_open_close, "/dev/" + name, os.O_RDWR) for name in SEEN["dev"]}
    with open("/proc/self/mountinfo") as f:
        SEEN["mounts"] = {line.split()[4]: sorted(line.split()[5].split(",")) for line in f}
    libs = sorted(m for m in SEEN["mounts"] if os.path.basename(m).startswith("lib"))
    SEEN["exec_map"] = {m: _errno_of(_map_exec, m) for m in libs + ["/usr/bin/env"]}
    SEEN["write_lib"] = {m: _errno_of(_open_close, m, os.O_WRONLY) for m in libs}
    SEEN["soname_link"] = {p: os.path.realpath(p) for p in SEEN.get("links", ())}


def seen():
    """The worker's target: what its initialiser saw, and what it sees confined."""
    return {**{k: v for k, v in SEEN.items() if k != "mappings"},
            "after_seccomp": {p: os.path.exists(p) for p in ("/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl")}}


def ioctl_errno(cmd: int) -> str:
    """ioctl(cmd) on a memfd: the kernel answers ENOTTY to any NVIDIA number there, if the filter lets it by."""
    fd = os.memfd_create("not-a-gpu", os.MFD_CLOEXEC)
    ctypes.set_errno(0)
    result = libc.ioctl(fd, ctypes.c_ulong(cmd), ctypes.c_void_p(0))
    err = ctypes.get_errno()
    os.close(fd)
    return "ok" if result >= 0 else errno.errorcode[err]


def name_thread() -> int:
    return libc.prctl(15, b"cuda-EvtHandlR", 0, 0, 0)   # PR_SET_NAME, as pthread_setname_np names CUDA's threads


@pytest.fixture(scope="module")
def driver():
    """A fake driver (sandbox_workers.fake_gpu_driver) of a known-good version, whose initialiser records what it sees."""
    fake = fake_gpu_driver(f"{__name__}:stand_in_init", KNOWN_DRIVER)
    SEEN["links"] = [os.path.join(fake.lib_dirs[0], "libcuda.so.1")]
    yield fake
    shutil.rmtree(os.path.dirname(fake.dev_root))


def test_a_worker_gets_the_nodes_its_gpus_need_and_no_others(driver):
    dev = driver.dev_root
    assert gpu.device_nodes((1,), dev) == tuple(os.path.join(dev, n) for n in ("nvidiactl", "nvidia-uvm", "nvidia1"))
    assert gpu.device_nodes((0, 1), dev)[2:] == (os.path.join(dev, "nvidia0"), os.path.join(dev, "nvidia1"))
    assert gpu.devices(dev) == sorted(os.path.join(dev, n) for n in ("nvidia-uvm", "nvidia0", "nvidia1", "nvidiactl"))


def test_the_driver_libraries_are_found_in_the_lib_dirs(driver):
    lib = driver.lib_dirs[0]
    assert gpu.driver_libraries(driver.lib_dirs) == tuple(
        os.path.join(lib, n) for n in ("libcuda.so.1", "libcuda.so.999.1", "libnvidia-ml.so.1", "libnvidia-ml.so.999.1"))
    assert gpu.grant(CPU.limits, driver) is None


@pytest.mark.parametrize("devices,missing", [([2], "nvidia2"), ([0, 3], "nvidia3")])
def test_a_granted_gpu_the_host_lacks_refuses_the_worker(driver, devices, missing):
    policy = load_policy({"limits": {"gpu_devices": devices, "gpu_memory_bytes": BUDGET}})
    with pytest.raises(RtdError) as e:
        run_confined(seen, policy=policy, driver=driver)
    assert e.value.code is Code.E_LAYER_UNAVAILABLE and os.path.join(driver.dev_root, missing) in e.value.detail


def test_a_node_that_is_not_the_drivers_device_is_refused(driver):
    fake = os.path.join(driver.dev_root, "nvidia5")
    os.mknod(fake, 0o666 | 0o020000, os.makedev(1, 3))   # /dev/null's numbers under an NVIDIA name
    try:
        with pytest.raises(RtdError) as e:
            gpu.device_nodes((5,), driver.dev_root)
        assert e.value.code is Code.E_LAYER_UNAVAILABLE and "195:5" in e.value.detail
    finally:
        os.unlink(fake)


def test_no_libcuda_refuses_the_worker(driver, tmp_path):
    empty = gpu.Driver(driver.dev_root, (str(tmp_path),), driver.init, version_file=driver.version_file)
    with pytest.raises(RtdError) as e:
        run_confined(seen, policy=GPU1, driver=empty)
    assert e.value.code is Code.E_LAYER_UNAVAILABLE and "libcuda" in e.value.detail


@pytest.mark.parametrize("userns", [True, False], ids=["userns", "no_userns"])
def test_the_worker_sees_exactly_its_nodes_and_maps_the_driver_as_code(driver, userns):
    policy = load_policy({"disable_userns": not userns, "limits": {"gpu_devices": [1], "gpu_memory_bytes": BUDGET}})
    got = run_confined(seen, policy=policy, driver=driver)
    assert got["args"] == [[1], BUDGET]
    assert got["dev"] == ["nvidia-uvm", "nvidia1", "nvidiactl"]   # not nvidia0, uvm-tools, modeset
    for name, result in got["open"].items():   # reached the (absent) driver: not ENOENT, not EACCES (nodev)
        assert result in ("ENXIO", "ok"), (name, result)
    for name in got["dev"]:
        assert {"ro", "nosuid", "noexec"} <= set(got["mounts"]["/dev/" + name]) and "nodev" not in got["mounts"]["/dev/" + name]
    assert {"ro", "nosuid", "nodev", "noexec"} <= set(got["mounts"]["/dev"])
    lib = driver.lib_dirs[0]
    libs = {m for m in got["mounts"] if m.startswith(lib)}
    assert libs == {os.path.join(lib, "libcuda.so.999.1"), os.path.join(lib, "libnvidia-ml.so.999.1")}
    for m in libs:
        assert {"ro", "nosuid", "nodev"} <= set(got["mounts"][m]) and "noexec" not in got["mounts"][m], m
        assert got["exec_map"][m] == "ok" and got["write_lib"][m] == "EROFS", m
    assert got["exec_map"]["/usr/bin/env"] == "EPERM"   # the /usr bind stays noexec
    assert got["soname_link"] == {os.path.join(lib, "libcuda.so.1"): os.path.join(lib, "libcuda.so.999.1")}
    assert got["after_seccomp"] == {"/dev/nvidia0": False, "/dev/nvidia1": True, "/dev/nvidiactl": True}


def test_a_cpu_worker_has_no_dev_at_all():
    assert run_confined(os.path.exists, "/dev") is False


NVIDIA_ALLOWED = [seccomp.nvidia_ioctl(seccomp.NVIDIA_IOCTLS["NV_ESC_RM_CONTROL"]) | 0x20 << 16,   # any size
                  seccomp.nvidia_ioctl(seccomp.NVIDIA_IOCTLS["NV_ESC_CARD_INFO"]) | 0x2A0 << 16,
                  seccomp.UVM_IOCTLS["UVM_INITIALIZE"], seccomp.UVM_IOCTLS["UVM_MM_INITIALIZE"]]
# Outside the list, learned: refused with EPERM, named; (command, what the name says)
NVIDIA_LEARNED = [(seccomp.nvidia_ioctl(211) | 0x18 << 16, "NVIDIA 211 NV_ESC_IOCTL_XFER_CMD"),   # large parameters
                  (seccomp.nvidia_ioctl(209) | 0x08 << 16, "NVIDIA 209 NV_ESC_STATUS_CODE"),
                  (seccomp.nvidia_ioctl(0x99), "NVIDIA 153,"),                                    # a number no header names
                  (0x80004600 | seccomp.NVIDIA_IOCTLS["NV_ESC_RM_CONTROL"], "NVIDIA 42 NV_ESC_RM_CONTROL"),   # _IOR, not _IOWR
                  (2047, "UVM 2047 UVM_IS_8_SUPPORTED"), (71, "UVM 71 UVM_POPULATE_PAGEABLE"), (8, "an unlisted command")]
# Forbidden: a kill in every variant
NVIDIA_FORBIDDEN = [62,                                                         # UVM_TOOLS_READ_PROCESS_MEMORY
                    36,                                                         # UVM_DEBUG_ACCESS_MEMORY
                    seccomp.nvidia_ioctl(seccomp.NVIDIA_UNLISTED["NV_ESC_RM_I2C_ACCESS"]),
                    seccomp.nvidia_ioctl(seccomp.NVIDIA_UNLISTED["NV_ESC_RM_ACCESS_REGISTRY"]) & ~0xC0000000]


def trapped(fn, *args) -> dict:
    """In the worker: the call's outcome, and what the GPU filter's SIGSYS handler recorded meanwhile."""
    refusals = sigsys.Refusals()
    refusals.new()
    outcome = fn(*args)
    return {"outcome": outcome, "named": [seccomp.describe(t.nr, t.args) for t in refusals.new()]}


@pytest.mark.parametrize("cmd", NVIDIA_ALLOWED, ids=hex)
def test_the_gpu_filter_lets_nvidia_ioctls_reach_the_kernel(driver, cmd):
    assert run_confined(trapped, ioctl_errno, cmd, policy=GPU1, driver=driver) == {"outcome": "ENOTTY", "named": []}


@pytest.mark.parametrize("cmd,name", NVIDIA_LEARNED, ids=[hex(c) for c, _ in NVIDIA_LEARNED])
def test_the_gpu_filter_refuses_and_names_nvidia_ioctls_outside_its_list(driver, cmd, name):
    got = run_confined(trapped, ioctl_errno, cmd, policy=GPU1, driver=driver)
    assert got["outcome"] == "EPERM" and len(got["named"]) == 1, got
    assert got["named"][0].startswith(f"ioctl {cmd:#x} (") and name in got["named"][0], got


@pytest.mark.parametrize("cmd", NVIDIA_FORBIDDEN, ids=hex)
@pytest.mark.parametrize("policy", [GPU1, AUDIT1], ids=["gpu", "gpu_audit"])
def test_the_gpu_filter_kills_on_forbidden_ioctls(driver, cmd, policy):
    with pytest.raises(SandboxKilled) as e:
        run_confined(ioctl_errno, cmd, policy=policy, driver=driver)
    assert e.value.signal == signal.SIGSYS and e.value.layer == "seccomp"


@pytest.mark.parametrize("cmd", NVIDIA_ALLOWED + [c for c, _ in NVIDIA_LEARNED], ids=hex)
def test_the_cpu_filter_still_kills_on_nvidia_ioctls(cmd):
    with pytest.raises(SandboxKilled) as e:
        run_confined(ioctl_errno, cmd)
    assert e.value.signal == signal.SIGSYS and e.value.layer == "seccomp"


def _exec_map() -> str:
    fd = os.memfd_create("code", os.MFD_CLOEXEC)
    os.ftruncate(fd, 4096)
    try:
        return _errno_of(lambda: mmap.mmap(fd, 4096, mmap.MAP_PRIVATE, PROT_EXEC_READ))
    finally:
        os.close(fd)


# The learned calls as CUDA, its libraries or glibc under them make them: (call, how, what the name says)
LEARNED_CALLS = {
    "sysinfo": (lambda: raw_errno("sysinfo", ctypes.create_string_buffer(128)), "sysinfo"),
    "get_mempolicy": (lambda: raw_errno("get_mempolicy", 0, 0, 0, 0, 0), "get_mempolicy"),   # libnuma's probe
    "set_mempolicy": (lambda: raw_errno("set_mempolicy", 0, 0, 0), "set_mempolicy"),
    "readlink": (lambda: _errno_of(os.readlink, "/proc/self/exe"), "readlink"),
    "mkdir": (lambda: _errno_of(os.mkdir, "/scratch/.nv"), "mkdir"),   # CUDA's JIT cache directory
    "mmap_exec": (_exec_map, "mmap with PROT_EXEC"),                    # a library dlopened after the filter
}


@pytest.mark.parametrize("call", sorted(LEARNED_CALLS))
def test_the_gpu_filter_refuses_and_names_the_harmless_calls_cuda_may_make(driver, call):
    make, name = LEARNED_CALLS[call]
    got = run_confined(trapped, make, policy=GPU1, driver=driver)
    assert got["outcome"] == "EPERM" and got["named"] and got["named"][-1].startswith(name), got


@pytest.mark.parametrize("call", ["sysinfo", "get_mempolicy", "readlink"])
def test_the_cpu_filter_kills_on_them(call):
    with pytest.raises(SandboxKilled) as e:
        run_confined(LEARNED_CALLS[call][0])
    assert e.value.signal == signal.SIGSYS and e.value.layer == "seccomp"


@pytest.mark.parametrize("call", ["ptrace", "unshare", "execve", "socket"])
@pytest.mark.parametrize("policy", [GPU1, AUDIT1], ids=["gpu", "gpu_audit"])
def test_dangerous_calls_still_kill_a_gpu_worker(driver, call, policy):
    args = {"ptrace": (16, 1, 0, 0), "unshare": (0x10000000,), "execve": (b"/usr/bin/env", 0, 0), "socket": (2, 1, 0)}[call]
    with pytest.raises(SandboxKilled) as e:
        run_confined(raw_errno, call, *args, policy=policy, driver=driver)
    assert e.value.signal == signal.SIGSYS and e.value.layer == "seccomp"


def test_in_audit_mode_learned_calls_go_through_and_unknown_ones_are_named_instead_of_killing(driver):
    # learned: let through (the kernel logs them), so the call reaches the kernel and nothing is named
    assert run_confined(trapped, LEARNED_CALLS["sysinfo"][0], policy=AUDIT1, driver=driver) == {"outcome": "ok", "named": []}
    assert run_confined(trapped, ioctl_errno, NVIDIA_LEARNED[0][0], policy=AUDIT1, driver=driver) == {
        "outcome": "ENOTTY", "named": []}
    assert run_confined(trapped, _exec_map, policy=AUDIT1, driver=driver) == {"outcome": "ok", "named": []}
    # unknown (neither allowed, learned nor forbidden): refused and named, where the enforcing filter kills
    got = run_confined(trapped, raw_errno, "getpriority", 0, 0, policy=AUDIT1, driver=driver)
    assert got == {"outcome": "EPERM", "named": ["getpriority"]}
    with pytest.raises(SandboxKilled):
        run_confined(raw_errno, "getpriority", 0, 0, policy=GPU1, driver=driver)


def test_a_call_trapped_on_another_thread_is_named_too(driver):
    """CUDA's helper threads make calls too: the handler runs on the thread the filter trapped."""
    def on_a_thread():
        box = []
        worker = threading.Thread(target=lambda: box.append(LEARNED_CALLS["sysinfo"][0]()))
        worker.start()
        worker.join()
        return box[0]
    assert run_confined(trapped, on_a_thread, policy=GPU1, driver=driver) == {"outcome": "EPERM", "named": ["sysinfo"]}


def test_an_unknown_driver_is_refused_unless_the_policy_audits(driver, tmp_path):
    (tmp_path / "version").write_text("999.1.2\n")
    unknown = gpu.Driver(driver.dev_root, driver.lib_dirs, driver.init, driver.include_dirs, str(tmp_path / "version"))
    with pytest.raises(RtdError) as e:
        run_confined(seen, policy=GPU1, driver=unknown)
    assert e.value.code is Code.E_LAYER_UNAVAILABLE and "999.1.2 is not on the GPU filter's known-good list" in e.value.detail
    assert run_confined(trapped, raw_errno, "getpriority", 0, 0, policy=AUDIT1, driver=unknown)["named"] == ["getpriority"]
    missing = gpu.Driver(driver.dev_root, driver.lib_dirs, driver.init, driver.include_dirs, str(tmp_path / "absent"))
    with pytest.raises(RtdError) as e:
        run_confined(seen, policy=GPU1, driver=missing)
    assert "(version unreadable)" in e.value.detail
    assert KNOWN_DRIVER in gpu.known_drivers() and gpu.check_driver(KNOWN_DRIVER, audit=False) == "known"


def test_gpu_workers_may_name_their_threads_and_cpu_workers_may_not(driver):
    assert run_confined(name_thread, policy=GPU1, driver=driver) == 0
    with pytest.raises(SandboxKilled) as e:
        run_confined(name_thread)
    assert e.value.signal == signal.SIGSYS and e.value.layer == "seccomp"


def test_each_variant_compiles_once():
    gpu_filter = seccomp.compiled("gpu")
    assert seccomp.compiled("gpu") is gpu_filter and len(gpu_filter.programs) == 2 and gpu_filter.traps
    assert gpu_filter.programs != seccomp.compiled("gpu-audit").programs != seccomp.compiled("cpu").programs
    assert seccomp.gpu_status().startswith("compiles")


def test_aligned_blocks_match_exactly_the_numbers_given():
    numbers = set(range(256)) - {3, 57, 77, 200, 255}
    blocks = seccomp.aligned_blocks(numbers, 8)
    assert {n for n in range(256) if any(n & mask == value for mask, value in blocks)} == numbers and len(blocks) < 40


def test_the_default_initialiser_without_cupy_refuses_the_worker(driver):
    if importlib.util.find_spec("cupy"):
        pytest.skip("CuPy is installed: the default initialiser runs (bench/gpu_check.sh on a GPU host)")
    real = gpu.Driver(driver.dev_root, driver.lib_dirs, version_file=driver.version_file)   # gpu.CUDA_INIT
    with pytest.raises(RtdError) as e:
        run_confined(seen, policy=GPU1, driver=real)
    assert e.value.code is not Code.E_INTERNAL and ("cupy" in e.value.detail.lower() or "init_device" in e.value.detail)


def test_a_gpu_tenants_spare_initialises_before_its_job(driver):
    acme = TenantIdentity("gpu-acme", 61030, 61030)
    zygote = Zygote.start(preload=("rtd.sandbox.echo", __name__), driver=driver)
    try:
        stop(*start_echo(zygote, acme, GPU1))
        assert zygote.settle(10)
        spare, = [sp for sp in zygote.spares() if sp.identity == acme]
        worker = next(int(p) for path in spare.cgroup.procs_files for p in open(path).read().split()
                      if proc_status(int(p))["NSpid"].split()[-1] == "1")
        with open(f"/proc/{worker}/maps") as f:   # the initialiser's mapping of libcuda, made before any job
            assert any(line.rstrip().endswith("libcuda.so.999.1") for line in f)
        assert proc_status(worker)["Seccomp"] == "2"
        handle, sock = start_echo(zygote, acme, GPU1)
        assert handle.id == spare.id
        stop(handle, sock)
    finally:
        zygote.close()


# NVRTC reading headers after the filter (a spare compiles a model's kernels at load): read-only
# opens of the bound header directories work, any write flag is the GPU filter's EPERM (the
# kernel would say EROFS, or let O_APPEND by), what is not bound is absent.
WRITE_FLAGS = {"O_WRONLY": os.O_WRONLY, "O_RDWR": os.O_RDWR, "O_CREAT": os.O_CREAT, "O_TRUNC": os.O_TRUNC,
               "O_APPEND": os.O_APPEND, "O_TMPFILE": os.O_TMPFILE | os.O_RDWR}
NO_UNSHARE = load_policy({"unsafe_disable_seccomp": True, "limits": {"gpu_devices": [1], "gpu_memory_bytes": BUDGET}})


def headers_seen(includes: list, secret: str) -> dict:
    """In the worker: read the headers, open them with each write flag, look for what is not granted."""
    cupy_inc, cuda_inc = includes
    with open("/proc/self/mountinfo") as f:
        mounts = {line.split()[4]: sorted(line.split()[5].split(",")) for line in f}
    with open(os.path.join(cuda_inc, "cuda_fp16.h")) as f, open(os.path.join(cupy_inc, "cupy/complex.cuh")) as g:
        read = [f.read(), g.read()]
    return {"read": read, "directory": _errno_of(_open_close, cupy_inc, os.O_RDONLY | os.O_DIRECTORY),   # not O_TMPFILE
            "mounts": {m: flags for m, flags in mounts.items() if "include" in m},
            "write": {name: _errno_of(_open_close, os.path.join(cupy_inc if name == "O_TMPFILE" else cuda_inc,
                                                                "" if name == "O_TMPFILE" else "cuda_fp16.h"), flags)
                      for name, flags in WRITE_FLAGS.items()},
            "create": _errno_of(_open_close, os.path.join(cuda_inc, "new.h"), os.O_WRONLY | os.O_CREAT),
            "secret": _errno_of(_open_close, secret, os.O_RDONLY)}


def raw_errno(name: str, *args) -> str:
    """The call by number (libseccomp's for this machine): "ok" or the errno's name."""
    ctypes.set_errno(0)
    result = libc.syscall(ctypes.c_long(pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name)),
                          *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    return "ok" if result >= 0 else errno.errorcode[ctypes.get_errno()]


def stat_errno(path: str) -> str:
    """stat(2) itself, the call NVRTC makes on each candidate header path (os.stat makes statx)."""
    return raw_errno("stat", path.encode(), ctypes.create_string_buffer(256))


def _includes(driver) -> list:
    return list(driver.include_dirs)


def test_the_grant_names_the_header_directories(driver):
    top = os.path.dirname(driver.dev_root)
    got = gpu.grant(GPU1.limits, driver)
    assert got.headers == (os.path.join(top, "cupy/include"), os.path.join(top, "cuda/include"))
    assert gpu.Grant.from_dict(json.loads(json.dumps(got.to_dict()))) == got   # as the arm request carries it
    with pytest.raises(RtdError) as e:
        gpu.Grant.from_dict({**json.loads(json.dumps(got.to_dict())), "headers": [1]})
    assert e.value.code is Code.E_CONTAINMENT


@pytest.mark.parametrize("missing", ["relative/include", "/var/tmp/rtd-no-such-include"])
def test_a_header_directory_that_is_not_there_refuses_the_worker(driver, missing):
    bad = dataclasses.replace(driver, include_dirs=(missing,))
    with pytest.raises(RtdError) as e:
        run_confined(seen, policy=GPU1, driver=bad)
    assert e.value.code is Code.E_LAYER_UNAVAILABLE and missing in e.value.detail


def test_without_include_dirs_the_grant_finds_cupys_and_cudas(driver, tmp_path, monkeypatch):
    """The default search, on a CuPy package and a CUDA_PATH made here: CuPy is found, not imported."""
    try:
        import cuda.pathfinder  # noqa: F401
        pytest.skip("cuda-pathfinder is installed: it names CUDA's headers and keeps its first answer")
    except ImportError:
        pass
    (tmp_path / "site/cupy/_core/include/cupy").mkdir(parents=True)
    (tmp_path / "site/cupy/__init__.py").write_text("raise ImportError('the supervisor must not import CuPy')\n")
    (tmp_path / "cuda/include").mkdir(parents=True)
    (tmp_path / "cuda/include/cuda_runtime.h").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("CUDA_PATH", str(tmp_path / "cuda"))
    gpu._found_header_dirs.cache_clear()
    try:
        found = gpu.grant(GPU1.limits, dataclasses.replace(driver, include_dirs=None)).headers
    finally:
        gpu._found_header_dirs.cache_clear()
    assert found[:2] == (str(tmp_path / "site/cupy/_core/include"), str(tmp_path / "cuda/include"))


@pytest.mark.parametrize("userns", [True, False], ids=["userns", "no_userns"])
def test_a_gpu_worker_reads_its_headers_after_seccomp_and_writes_none(driver, userns):
    policy = load_policy({"disable_userns": not userns, "limits": {"gpu_devices": [1], "gpu_memory_bytes": BUDGET}})
    top = os.path.dirname(driver.dev_root)
    got = run_confined(headers_seen, _includes(driver), os.path.join(top, "secret.h"), policy=policy, driver=driver)
    assert got["read"] == ["// cuda-13.0/include/cuda_fp16.h\n", "// cupy/include/cupy/complex.cuh\n"]
    assert got["directory"] == "ok"
    assert set(got["mounts"]) == {os.path.join(top, "cupy/include"), os.path.join(top, "cuda-13.0/include")}
    for m, flags in got["mounts"].items():
        assert {"ro", "nosuid", "nodev", "noexec"} <= set(flags), m
    assert got["write"] == dict.fromkeys(WRITE_FLAGS, "EPERM")
    assert OBSERVED[("open", errno.EPERM)] == "seccomp"   # what doctor credits that refusal to
    assert got["create"] == "EPERM"
    assert got["secret"] == "ENOENT" and OBSERVED[("open", errno.ENOENT)] == "mounts"


def test_without_seccomp_the_read_only_bind_refuses_the_write(driver):
    top = os.path.dirname(driver.dev_root)
    got = run_confined(headers_seen, _includes(driver), os.path.join(top, "secret.h"), policy=NO_UNSHARE, driver=driver)
    assert got["read"][0] == "// cuda-13.0/include/cuda_fp16.h\n"
    assert got["write"]["O_WRONLY"] == got["write"]["O_TRUNC"] == got["create"] == "EROFS"
    assert got["write"]["O_APPEND"] == "ok"   # read-only with O_APPEND: only the filter refuses it
    assert OBSERVED[("open", errno.EROFS)] == "mounts"


def test_a_cpu_worker_still_opens_nothing():
    assert run_confined(_errno_of, _open_close, "/usr/bin/env", os.O_RDONLY) == "EPERM"
    assert run_confined(os.path.exists, "/usr/bin/env") is True   # there, yet not to be opened


@pytest.mark.skipif(platform.machine() != "x86_64", reason="open(2) and stat(2) are x86_64's legacy calls")
def test_legacy_open_is_filtered_on_its_own_flags_argument_and_stat_is_gpu_only(driver):
    header = os.path.join(driver.include_dirs[1], "cuda_fp16.h")
    path = header.encode()
    assert run_confined(raw_errno, "open", path, os.O_RDONLY, policy=GPU1, driver=driver) == "ok"   # fd left open: the worker ends
    assert run_confined(raw_errno, "open", path, os.O_WRONLY, policy=GPU1, driver=driver) == "EPERM"
    assert run_confined(stat_errno, header, policy=GPU1, driver=driver) == "ok"
    with pytest.raises(SandboxKilled) as e:
        run_confined(stat_errno, "/usr/bin/env")
    assert e.value.signal == signal.SIGSYS and e.value.layer == "seccomp"


def test_the_gpu_checks_filter_evaluator_answers_as_the_kernel_did():
    """bench/filter_eval.py reads the compiled filter's BPF; on the calls the confined workers
    above made, it answers what the kernel did (allow, trap: EPERM and named, kill)."""
    from bench.filter_eval import verdict
    assert {verdict("gpu", "ioctl", (3, cmd))[0] for cmd in NVIDIA_ALLOWED} == {"allow"}
    assert {verdict("gpu", "ioctl", (3, cmd))[0] for cmd, _ in NVIDIA_LEARNED} == {"trap"}
    assert {verdict(v, "ioctl", (3, cmd))[0] for cmd in NVIDIA_FORBIDDEN for v in ("gpu", "gpu-audit")} == {"kill"}
    assert [verdict("gpu", name)[0] for name in ("sysinfo", "get_mempolicy", "readlink", "getpriority", "unshare")] == \
        ["trap", "trap", "trap", "kill", "kill"]
    assert [verdict("gpu-audit", name)[0] for name in ("sysinfo", "getpriority", "unshare")] == ["log", "trap", "kill"]
    assert verdict("cpu", "sysinfo")[0] == "kill" and verdict("cpu", "openat", (0, 0, 0)) == ("errno", 1)
