"""Which GPU memory limit holds a tenant: dmem.max where the kernel lists a region of each of
its GPUs, else the NVML watcher (MPS reported, not counted). The host's own
files are read where it has them (this host: no GPU, no dmem controller, no MPS); the
choice between layers is checked on directories laid out as the kernel, the NVIDIA driver
and the MPS daemon lay theirs out."""
import os
import socket

import pytest

from rtd.sandbox import detect_layout, gpu_memory, load_policy
from rtd.sandbox.cgroup import WorkerCgroup
from rtd.sandbox.host import host_report, plan_layers

BUS = "0000:3b:00.0"


@pytest.fixture
def gpu_host(tmp_path):
    """/dev with nvidia0 and nvidia1, the driver's proc files for both, and a v2 root whose
    dmem.capacity lists GPU 0's VRAM only."""
    dev, proc, v2 = tmp_path / "dev", tmp_path / "gpus", tmp_path / "cgroup"
    for d in (dev, v2):
        d.mkdir()
    for minor, bus in ((0, BUS), (1, "0000:5e:00.0")):
        (dev / f"nvidia{minor}").touch()
        (proc / bus.upper()).mkdir(parents=True)
        (proc / bus.upper() / "information").write_text(
            f"Model: \t\t NVIDIA H100\nIRQ:   \t\t 150\nGPU UUID: \t GPU-{minor}\nBus Location: \t {bus}\n"
            f"Device Minor: \t {minor}\n")
    (v2 / "dmem.capacity").write_text(f"drm/{BUS}/vram0 85899345920\ndrm/0000:00:02.0/stolen 8650752\n")
    return str(dev), str(proc), str(v2)


def test_a_policy_without_gpus_gets_no_device_and_no_limit():
    limit = gpu_memory.plan((), 0, None, False)
    assert (limit.layer, limit.state, limit.dmem_max) == ("none", gpu_memory.NO_GPU, ())


def test_a_gpu_the_host_lacks_is_unavailable(gpu_host):
    dev, proc, v2 = gpu_host
    limit = gpu_memory.plan((2,), 1 << 30, v2, True, dev_root=dev, proc_root=proc)
    assert limit.layer == "unavailable" and limit.state == f"unavailable: no GPU 2 on this host ({dev}/nvidia2 missing)"


def test_dmem_is_first_where_every_gpu_of_the_tenant_has_a_region(gpu_host):
    dev, proc, v2 = gpu_host
    assert gpu_memory.gpu_buses(proc) == {0: BUS, 1: "0000:5e:00.0"}
    limit = gpu_memory.plan((0,), 1 << 30, v2, True, dev_root=dev, proc_root=proc, environ={})
    assert limit.layer == "dmem" and limit.dmem_max == (f"drm/{BUS}/vram0 1073741824",)
    assert limit.state.startswith("enforced (cgroup v2 dmem.max 1073741824 bytes")
    # GPU 1 has no region (NVIDIA's driver may register none): not dmem, whatever GPU 0 has
    assert gpu_memory.plan((0, 1), 1 << 30, v2, True, dev_root=dev, proc_root=proc, environ={}).layer != "dmem"
    # a v2 tree rtd may not write cannot carry the limit
    assert gpu_memory.plan((0,), 1 << 30, v2, False, dev_root=dev, proc_root=proc, environ={}).layer != "dmem"


def test_mps_is_reported_not_counted_a_worker_cannot_reach_its_daemon(gpu_host, tmp_path):
    dev, proc, _ = gpu_host
    pipes = tmp_path / "mps"
    pipes.mkdir()
    environ = {"CUDA_MPS_PIPE_DIRECTORY": str(pipes)}
    (pipes / "control").write_text("")   # a plain file is no daemon
    assert gpu_memory.mps_pipe_directory(environ) is None
    assert "MPS" not in gpu_memory.plan((0,), 1 << 30, None, False, dev_root=dev, proc_root=proc, environ=environ).state
    (pipes / "control").unlink()
    with socket.socket(socket.AF_UNIX) as control:
        control.bind(str(pipes / "control"))
        assert gpu_memory.mps_pipe_directory(environ) == str(pipes)
        limit = gpu_memory.plan((0, 1), 1 << 30, None, False, dev_root=dev, proc_root=proc, environ=environ)
    assert limit.layer == "watcher" and f"NVIDIA MPS runs at {pipes} but is not used" in limit.state


def test_otherwise_the_nvml_watcher_and_doctor_says_what_it_does_not_cover(gpu_host):
    dev, proc, _ = gpu_host
    limit = gpu_memory.plan((1,), 1 << 30, None, False, dev_root=dev, proc_root=proc, environ={})
    assert limit.layer == "watcher"
    if gpu_memory.nvml_library():
        assert limit.state.startswith("enforced (NVML watcher") and "detection, not prevention" in limit.state
        assert "another tenant on the same GPU can hit out-of-memory" in limit.state
    else:
        assert limit.state.startswith("advisory (CuPy's pool cap only") and "no NVML library" in limit.state


def test_this_host_is_described_as_it_is():
    layout = detect_layout()
    with open(os.path.join(layout.v2_root, "cgroup.controllers")) if layout.v2_root else open(os.devnull) as f:
        v2_controllers = f.read().split()
    assert ("dmem" in layout.v2_controllers) == ("dmem" in v2_controllers)
    report = host_report()
    has_capacity = bool(gpu_memory.dmem_capacity(layout.v2_root))
    assert (report["dmem"] != "unavailable: no dmem controller or region") == has_capacity
    assert report["nvml"] == (gpu_memory.nvml_library() or "unavailable: no libnvidia-ml")
    if gpu_memory.mps_pipe_directory() is None:
        assert report["mps"] == "unavailable: no MPS control daemon"
    if not gpu_memory.host_gpus():
        assert report["gpu_memory_limit"] == "unavailable: no GPU on this host (no /dev/nvidiaN)"
    else:
        assert "the tenant's gpu_memory_bytes" in report["gpu_memory_limit"]
    assert report["layers"]["gpu"] == gpu_memory.NO_GPU   # the production policy names no GPU
    policy = load_policy({"limits": {"gpu_devices": [0], "gpu_memory_bytes": 1 << 30}})
    if not os.path.exists("/dev/nvidia0"):
        assert plan_layers(policy, layout)["gpu"] == "unavailable: no GPU 0 on this host (/dev/nvidia0 missing)"


@pytest.mark.skipif(os.geteuid() != 0, reason="writing cgroups needs root")
def test_dmem_max_is_written_on_the_tenant_node_where_the_kernel_offers_it():
    layout = detect_layout()
    if "dmem" not in layout.v2_controllers:
        pytest.skip("this host's cgroup v2 tree has no dmem controller (CONFIG_CGROUP_DMEM, or v2 not unified)")
    regions = gpu_memory.dmem_regions(gpu_memory.host_gpus(), gpu_memory.dmem_capacity(layout.v2_root),
                                      gpu_memory.gpu_buses())
    if not regions:
        pytest.skip("no GPU of this host has a dmem region (NVIDIA's driver registers none)")
    if not layout.writable("v2", "auto"):
        pytest.skip("this process may not create cgroups in the v2 tree")
    gpu = min(regions)
    policy = load_policy({"limits": {"gpu_devices": [gpu], "gpu_memory_bytes": 1 << 30}})
    cg = WorkerCgroup.create(layout, "auto", f"rc{os.getpid()}", "gpumem", f"rc{os.getpid()}-dmem", policy.limits)
    try:
        with open(os.path.join(cg.tenant_dirs["v2"], "dmem.max")) as f:
            written = dict(line.split() for line in f if line.strip())
        assert all(written[r] == str(1 << 30) for r in regions[gpu])
    finally:
        cg.remove()
