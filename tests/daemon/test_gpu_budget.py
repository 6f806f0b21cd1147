"""A GPU tenant's budget on a real GPU: raw cudaMalloc past gpu_memory_bytes in a confined
worker is stopped (tests/daemon/gpu_hog.py: the zygote, the driver's NVML, the supervisor's
watcher), and a real `rtd serve` runs the GPU tenant's model on the GPU while the other
tenant keeps its results. Every test needs CuPy, a GPU, NVML and root, and skips with the
reason without them (tests/daemon/test_gpu_watch.py covers the watcher on a stand-in NVML).

Nothing here initialises CUDA or NVML in the test process: it forks zygotes, and
test_gpu_watch.py loads a stand-in libnvidia-ml.so.1 into it."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from rtd.kernels import compile_model
from tests.daemon import gpu_hog
from tests.daemon.conftest import Daemon, mlp

NO_GPU = gpu_hog.unavailable_reason()
pytestmark = pytest.mark.skipif(NO_GPU is not None, reason=f"no GPU: {NO_GPU}")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUDGET = 2 << 30   # well above a worker's CUDA context and cuBLAS workspace, which NVML counts


def test_raw_malloc_past_the_budget_is_stopped(record_property):
    env = {k: v for k, v in os.environ.items() if k != "RTD_NVML_STANDIN"}
    done = subprocess.run([sys.executable, "-m", "tests.daemon.gpu_hog", str(BUDGET)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    print(json.dumps(result, indent=1))
    assert "GPU-5ca1ab1e-0000-4000-8000-000000000000" not in result["gpus"]   # the driver's NVML, not the stand-in
    assert result["held"] >= result["chunk"], "stopped before its first raw malloc: the context alone is over budget?"
    how = gpu_hog.stopped(result)
    assert how is not None, f"raw malloc past the budget was not stopped: {result}"
    if how == "gpu":
        kill = result["kill"]
        assert result["status"]["signal"] == 9 and "gpu_memory_bytes" in result["status"]["reason"]
        assert kill["pid"] > 0 and kill["tenant_bytes"] > BUDGET, kill
        record_property("gpu_kill_latency_ms", kill["latency_ms"])
        record_property("gpu_kill_to_exit_ms", kill["kill_to_exit_ms"])
        print(f"stopped by the NVML watcher: {kill['event']}; held {result['held'] >> 20} MiB of raw malloc; "
              f"exit reported {kill['kill_to_exit_ms']} ms after the kill")
    else:
        print(f"stopped by dmem.max: malloc refused at {result['held'] >> 20} MiB ({result['refused']})")


@pytest.fixture
def gpu_daemon(tmp_path, monkeypatch):
    """rtd serve with tenants acme (GPU 0, a budget of 2 GiB) and beta (no GPU), on the driver's NVML."""
    monkeypatch.delenv("RTD_NVML_STANDIN", raising=False)
    d = Daemon(tmp_path, policies={"acme": {"memory_bytes": 2147483648, "gpu_devices": [0], "gpu_memory_bytes": BUDGET}})
    d.start()
    yield d
    assert d.stop() == 0, d.read_log()[-3000:]


def gpu_processes() -> dict | None:
    """{host pid: MiB} of the GPU's compute processes, as nvidia-smi lists them (None without it)."""
    if shutil.which("nvidia-smi") is None:
        return None
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=30).stdout
    return {int(pid): int(mib) for pid, mib in (line.split(",") for line in out.splitlines() if "," in line)}


def test_the_gpu_tenants_model_runs_on_the_gpu_and_the_other_tenant_keeps_its_results(gpu_daemon):
    d = gpu_daemon
    model = mlp(weight_seed=3, inner=64)
    d.client("beta").load("mlp", d.package("beta", model, "mlp"))
    x = np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32)
    before = d.client("beta").infer("mlp", {"X": x})["Y"]
    beta_pids = d.pids("beta")
    d.client("acme").load("mlp", d.package("acme", model, "mlp"), timeout=120)   # device cuda: refused if CUDA does not start
    assert "event=gpu_watch " in d.read_log() and "tenants=acme" in d.read_log()
    reference = compile_model(model).run({"X": x})["Y"]   # CPU, in this process
    for _ in range(20):
        np.testing.assert_allclose(d.client("acme").infer("mlp", {"X": x})["Y"], reference, rtol=1e-4, atol=1e-5)
    (acme_pid,) = d.pids("acme").values()
    listed = gpu_processes()
    if listed is not None:
        assert acme_pid in listed and not set(beta_pids.values()) & set(listed), listed
    assert "event=gpu_kill" not in d.read_log()
    assert d.pids("beta") == beta_pids
    np.testing.assert_array_equal(d.client("beta").infer("mlp", {"X": x})["Y"], before)
