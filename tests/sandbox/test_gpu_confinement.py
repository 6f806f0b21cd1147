"""A GPU tenant's worker, confined for real on a host without a GPU: a fake device root of
real character devices (os.mknod with NVIDIA's majors) and a fake driver library directory
stand for the host's /dev and driver, and a stand-in initialiser, run by the worker exactly
where CUDA's would be (after the mounts, before privileges and seccomp), records what the
worker sees. What it cannot show here (CUDA itself initialising in that root) needs a GPU
host: see bench/gpu_check.sh.

The fake root lives in /var/tmp, not /tmp: the worker's new root is a tmpfs mounted over /tmp
in its mount namespace, which would hide a source there."""
import ctypes
import errno
import importlib.util
import json
import mmap
import os
import shutil
import signal
import tempfile

import platform

import pyseccomp
import pytest
from sandbox_workers import proc_status, start_echo, stop

from rtd.errors import Code, RtdError
from rtd.sandbox import SandboxKilled, TenantIdentity, gpu, load_policy, run_confined, seccomp
from rtd.sandbox.escapes import OBSERVED
from rtd.sandbox.syscalls import libc
from rtd.sandbox.zygote import Zygote

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="device nodes (mknod) and confined workers need root"),
              pytest.mark.usefixtures("no_cgroup_leftovers")]
BUDGET = 1 << 30
GPU1 = load_policy({"limits": {"gpu_devices": [1], "gpu_memory_bytes": BUDGET}})
CPU = load_policy()
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
    """/var/tmp/rtd-gpu-*/dev with nvidiactl, nvidia0, nvidia1, nvidia-uvm, nvidia-uvm-tools and
    nvidia-modeset as real character devices, lib/ with a libcuda and a libnvidia-ml, each a
    versioned file and its soname link, and two header directories: cupy/include (with
    cupy/complex.cuh) and cuda-13.0/include (cuda_fp16.h), the latter granted through the
    link cuda -> cuda-13.0 as a toolkit's often is; every header writable by anyone (only the
    filter and the read-only bind refuse). secret.h beside them is not granted."""
    top = tempfile.mkdtemp(prefix="rtd-gpu-", dir="/var/tmp")
    os.chmod(top, 0o755)   # a user-namespace worker binds from here as the tenant's uid
    dev, lib = os.path.join(top, "dev"), os.path.join(top, "lib")
    os.mkdir(dev, 0o755)
    os.mkdir(lib, 0o755)
    uvm = gpu.uvm_major() or 237   # no driver here: any free major stands for nvidia-uvm
    for name, major, minor in (("nvidiactl", 195, 255), ("nvidia0", 195, 0), ("nvidia1", 195, 1),
                               ("nvidia-modeset", 195, 254), ("nvidia-uvm", uvm, 0), ("nvidia-uvm-tools", uvm, 1)):
        os.mknod(os.path.join(dev, name), 0o600 | 0o020000, os.makedev(major, minor))
        os.chmod(os.path.join(dev, name), 0o666)   # as the driver makes them (mknod's mode goes through the umask)
    for stem in ("libcuda.so", "libnvidia-ml.so"):
        with open(os.path.join(lib, stem + ".999.1"), "wb") as f:
            f.write(b"\x7fELF" + bytes(8188))
        os.chmod(os.path.join(lib, stem + ".999.1"), 0o666)   # writable by anyone: only the read-only bind refuses
        os.symlink(stem + ".999.1", os.path.join(lib, stem + ".1"))
    SEEN["links"] = [os.path.join(lib, "libcuda.so.1")]
    for header in ("cupy/include/cupy/complex.cuh", "cuda-13.0/include/cuda_fp16.h", "secret.h"):
        os.makedirs(os.path.dirname(os.path.join(top, header)), 0o755, exist_ok=True)
        with open(os.path.join(top, header), "w") as f:
            f.write(f"// {header}\n")
        os.chmod(os.path.join(top, header), 0o666)
    os.symlink("cuda-13.0", os.path.join(top, "cuda"))
    includes = (os.path.join(top, "cupy/include"), os.path.join(top, "cuda/include"))
    yield gpu.Driver(dev_root=dev, lib_dirs=(lib,), init=f"{__name__}:stand_in_init", include_dirs=includes)
    shutil.rmtree(top)


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
    empty = gpu.Driver(driver.dev_root, (str(tmp_path),), driver.init)
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
NVIDIA_REFUSED = [seccomp.nvidia_ioctl(0x99),                   # an NV_ESC number not listed
                  0x80004600 | seccomp.NVIDIA_IOCTLS["NV_ESC_RM_CONTROL"],   # listed number, _IOR not _IOWR
                  62]                                            # UVM_TOOLS_READ_PROCESS_MEMORY


@pytest.mark.parametrize("cmd", NVIDIA_ALLOWED, ids=hex)
def test_the_gpu_filter_lets_nvidia_ioctls_reach_the_kernel(driver, cmd):
    assert run_confined(ioctl_errno, cmd, policy=GPU1, driver=driver) == "ENOTTY"


@pytest.mark.parametrize("cmd", NVIDIA_REFUSED, ids=hex)
def test_the_gpu_filter_kills_on_other_ioctls(driver, cmd):
    with pytest.raises(SandboxKilled) as e:
        run_confined(ioctl_errno, cmd, policy=GPU1, driver=driver)
    assert e.value.signal == signal.SIGSYS and e.value.layer == "seccomp"


@pytest.mark.parametrize("cmd", NVIDIA_ALLOWED, ids=hex)
def test_the_cpu_filter_still_kills_on_nvidia_ioctls(cmd):
    with pytest.raises(SandboxKilled) as e:
        run_confined(ioctl_errno, cmd)
    assert e.value.signal == signal.SIGSYS and e.value.layer == "seccomp"


def test_gpu_workers_may_name_their_threads_and_cpu_workers_may_not(driver):
    assert run_confined(name_thread, policy=GPU1, driver=driver) == 0
    with pytest.raises(SandboxKilled) as e:
        run_confined(name_thread)
    assert e.value.signal == signal.SIGSYS and e.value.layer == "seccomp"


def test_each_variant_compiles_once():
    gpu_program = seccomp.compiled("gpu")
    assert seccomp.compiled("gpu") is gpu_program and gpu_program != seccomp.compiled("cpu")
    assert seccomp.gpu_status().startswith("compiles")


def test_the_default_initialiser_without_cupy_refuses_the_worker(driver):
    if importlib.util.find_spec("cupy"):
        pytest.skip("CuPy is installed: the default initialiser runs (bench/gpu_check.sh on a GPU host)")
    real = gpu.Driver(driver.dev_root, driver.lib_dirs)   # gpu.CUDA_INIT
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
    bad = gpu.Driver(driver.dev_root, driver.lib_dirs, driver.init, include_dirs=(missing,))
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
        found = gpu.grant(GPU1.limits, gpu.Driver(driver.dev_root, driver.lib_dirs, driver.init)).headers
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
