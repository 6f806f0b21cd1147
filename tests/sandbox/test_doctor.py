"""rtctl doctor end to end: it tells the truth about this host and the battery holds."""
import json
import os
import subprocess
import sys

import pytest

from rtd.kernels import native
from rtd.sandbox import host_report

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="doctor launches confined workers (root)")


def test_doctor_json_reports_host_and_battery():
    out = subprocess.run([sys.executable, "-m", "rtd.cli.rtctl", "doctor", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["ok"] and data["escaped"] == [] and len(data["battery"]) >= 25
    assert data["host"]["kernel"] == os.uname().release
    if not os.path.exists("/dev/nvidia0"):   # no GPU: doctor says no watcher would run, and why
        assert data["host"]["nvml_gpus"].startswith("unavailable: NVML: ")


def test_host_report_never_claims_what_the_host_lacks():
    report = host_report()
    if not os.path.exists("/dev/nvidiactl") and not os.path.isdir("/dev/dri"):
        assert report["gpu"] == "unavailable: no NVIDIA device nodes in /dev"
        assert report["gpu_memory_limit"] == "unavailable: no GPU on this host (no /dev/nvidiaN)"
    with open("/proc/self/mounts") as f:
        favoured = any("favordynmods" in line.split()[3].split(",") for line in f if line.split()[2].startswith("cgroup"))
    assert report["cgroup"]["favordynmods"].startswith("on" if favoured else "off")
    with open("/proc/self/mounts") as f:
        has_v2 = any(line.split()[2] == "cgroup2" for line in f)
    assert (report["cgroup"]["v2_root"] is not None) == has_v2
    for resource in ("memory", "pids", "cpu"):
        state = report["layers"][resource]
        home = "v2" if resource in report["cgroup"]["v2_controllers"] else (
            "v1" if resource in report["cgroup"]["v1_controllers"] else None)
        assert state.startswith(f"enforced (cgroup {home}") if home else state.startswith("unavailable")
    cg = report["cgroup"]
    v1_used = {r for r in ("memory", "pids", "cpu") if r in cg["v1_controllers"] and r not in cg["v2_controllers"]}
    assert set(cg["writable"]) == ({"v2"} if cg["v2_root"] else set()) | v1_used
    assert report["cpu_kernels"] == ("numpy" if native.compiled is None else "compiled")
    for hierarchy, where in cg["writable"].items():
        assert where["base"].endswith("/rtd") and type(where["writable"]) is bool, hierarchy
    if not cg["writable"].get("v2", {}).get("writable"):
        assert report["layers"]["kill"] == "enforced (SIGKILL to the namespace's pid 1)"
    assert report["gpu_seccomp"].startswith("compiles (")   # the GPU variant's masked ioctl rules load in libseccomp
    cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    has_driver = any(stem in cache for stem in ("libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so"))
    assert isinstance(report["gpu_libraries"], list) == has_driver, report["gpu_libraries"]
    if not os.path.exists(os.path.join(report["cgroup"]["v2_root"] or "/-", "dmem.capacity")):
        assert report["dmem"].startswith("unavailable")
