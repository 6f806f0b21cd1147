"""The executor on a GPU: fused plans match the CPU's, CUDA graphs replay fresh inputs, plans
that cannot be graphed run eagerly, the allocator's cap refuses a request, fresh device memory
never shows another process's data, and a forked worker sets its device up after the fork.

Every test needs CuPy and a CUDA device and skips, with the reason, without them."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from rtd.kernels import backend_cupy, compile_model

from kernel_graphs import model, node, transformer_block

NO_GPU = backend_cupy.unavailable_reason()
pytestmark = pytest.mark.skipif(NO_GPU is not None, reason=f"no GPU: {NO_GPU}")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _python(source: str) -> subprocess.CompletedProcess:
    """A fresh process (its own CUDA context and budget), cwd the repository."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(source)], cwd=REPO, capture_output=True, text=True, timeout=300)


def test_a_fused_transformer_block_on_the_gpu_matches_the_cpu_and_replays_as_a_graph():
    cpu, gpu = compile_model(transformer_block()), compile_model(transformer_block(), device="cuda")
    rng = np.random.default_rng(0)
    for _ in range(4):   # trace, capture, then replays: each run's own inputs, never the captured ones
        feeds = {"x": rng.standard_normal((2, 4, 8)).astype(np.float32)}
        np.testing.assert_allclose(gpu.run(feeds)["out"], cpu.run(feeds)["out"], rtol=1e-4, atol=1e-5)
    stats = gpu.plan_stats(feeds)
    assert stats["cuda_graph"] is True
    assert {"LayerNorm", "Attention", "MatMulBias", "Softmax", "Gelu", "ElementwiseChain"} <= set(stats["ops"])


def test_a_data_dependent_plan_runs_eagerly_on_the_gpu():
    m = model([node("NonZero", ["x"], ["i"])], [("x", [5])], [("i", None)])
    gpu = compile_model(m, device="cuda")
    for x in ([0, 1, 0, 2, 3], [1, 0, 0, 0, 0], [0, 1, 0, 2, 3]):
        feeds = {"x": np.array(x, np.float32)}
        np.testing.assert_array_equal(gpu.run(feeds)["i"], np.array(np.nonzero(feeds["x"])))
    assert gpu.plan_stats(feeds)["cuda_graph"] is False


def test_a_request_past_the_gpu_budget_is_refused():
    done = _python("""
        import numpy as np
        from rtd.errors import Code, RtdError
        from rtd.kernels import compile_model
        from tests.kernels.kernel_graphs import model, node
        m = compile_model(model([node("Relu", ["x"], ["y"])], [("x", ["n"])], [("y", ["n"])]), device="cuda",
                          gpu_memory_limit=64 << 20)
        m.run({"x": np.ones(1 << 20, np.float32)})
        try:
            m.run({"x": np.ones(64 << 20, np.float32)})   # 256 MiB
        except RtdError as e:
            print(e.code.name)
    """)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["E_RESOURCE_EXHAUSTED"]


def test_fresh_device_memory_never_shows_another_processs_data():
    # the first process fills device memory with a pattern and dies without freeing it
    filled = _python("""
        import os
        from rtd.kernels import backend_cupy
        cupy = backend_cupy.array_module()
        blocks = [cupy.full(64 << 20, 0xA5, cupy.uint8) for _ in range(16)]
        cupy.cuda.get_current_stream().synchronize()
        os._exit(0)
    """)
    assert filled.returncode == 0, filled.stderr[-3000:]
    # the next takes the same amount fresh through rtd's allocator: every byte reads zero
    fresh = _python("""
        from rtd.kernels import backend_cupy
        cupy = backend_cupy.array_module()
        blocks = [cupy.empty(64 << 20, cupy.uint8) for _ in range(16)]
        print(sum(int(cupy.count_nonzero(b)) for b in blocks))
        raw = cupy.cuda.runtime.malloc(64 << 20)   # for the record: what the driver itself hands over
        view = cupy.ndarray(64 << 20, cupy.uint8, cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(raw, 64 << 20, None), 0))
        print("raw cudaMalloc bytes equal to the pattern:", int((view == 0xA5).sum()))
    """)
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    print(fresh.stdout)
    assert fresh.stdout.split()[0] == "0"


def test_a_forked_worker_sets_its_device_up_after_the_fork():
    done = _python("""
        import os
        import numpy as np
        from rtd.kernels import backend_cupy, compile_model   # the zygote's imports: CuPy loaded, no context
        from tests.kernels.kernel_graphs import transformer_block
        pid = os.fork()
        if pid == 0:
            try:
                backend_cupy.init_device((0,), 1 << 30)
                out = compile_model(transformer_block(), device="cuda").run({"x": np.ones((2, 4, 8), np.float32)})["out"]
                os._exit(0 if np.isfinite(out).all() else 3)
            except BaseException:
                os._exit(4)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
    """)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["0"]
