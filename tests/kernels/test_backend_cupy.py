"""The GPU backend's pieces that a host without CuPy or a GPU can exercise: the refusals (one
line, a stable code), the in-memory kernel cache and the disabled JIT cache, the pinned
staging pool's bookkeeping (over a NumPy buffer), that the warm-up before the worker's filter
covers every library-backed CuPy function an op calls (the warm-up itself runs only on a GPU:
test_gpu_exec.py, bench/gpu_check.sh), and which plans CudaPlan would capture as CUDA graphs."""
import gc
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from rtd.errors import Code, RtdError
from rtd.kernels import backend_cupy, compile_model
from rtd.kernels.cuda_plan import CudaPlan
from rtd.kernels.staging import StagingPool

from kernel_graphs import const, model, node

NO_GPU = backend_cupy.unavailable_reason()
WITHOUT_GPU = pytest.mark.skipif(NO_GPU is None, reason="this host has a GPU: the refusals are for hosts without one")


@WITHOUT_GPU
def test_init_device_refuses_in_one_line_without_a_gpu():
    with pytest.raises(RtdError) as refused:
        backend_cupy.init_device((0,), 1 << 30)
    assert refused.value.code is Code.E_LAYER_UNAVAILABLE
    assert refused.value.detail.startswith("GPU [0]: device cuda unavailable: ") and "\n" not in refused.value.detail
    assert NO_GPU in refused.value.detail


def test_init_device_needs_the_policys_gpus():
    with pytest.raises(RtdError) as refused:
        backend_cupy.init_device((), 1 << 30)
    assert refused.value.code is Code.E_POLICY_INVALID


@WITHOUT_GPU
def test_compiling_for_cuda_refuses_without_a_gpu():
    m = model([node("Relu", ["x"], ["y"])], [("x", [2])], [("y", [2])])
    with pytest.raises(RtdError) as refused:
        compile_model(m, device="cuda")
    assert refused.value.code is Code.E_OP_UNSUPPORTED
    assert refused.value.detail == f"device cuda unavailable: {NO_GPU}"


def test_no_generated_kernel_without_cupy_or_for_half():
    from rtd.kernels.ops.op_relu import Relu_6
    links = [(Relu_6({}, np), [0])]
    assert backend_cupy.chain_kernel(links, 1, np.float16) is None   # CuPy's float16 is not cuda_fp16's half
    if backend_cupy.cupy is None:
        assert backend_cupy.chain_kernel(links, 1, np.float32) is None


def test_kernel_cache_stays_in_memory_and_cudas_jit_cache_off_whatever_the_environment_said():
    env = dict(os.environ, CUPY_CACHE_IN_MEMORY="0", CUDA_CACHE_DISABLE="0")
    done = subprocess.run([sys.executable, "-c", "import os, rtd.kernels; print(os.environ['CUPY_CACHE_IN_MEMORY'], "
                           "os.environ['CUDA_CACHE_DISABLE'])"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "1 1"


# CuPy functions that reach a CUDA library (loaded at first use, which a confined worker cannot do)
LIBRARY_CALLS = {"matmul", "dot", "tensordot", "einsum", "linalg", "sort", "argsort", "partition", "argpartition", "unique",
                 "lexsort", "searchsorted", "random", "fft", "cumsum", "cumprod", "nonzero", "sum", "prod", "mean", "max",
                 "min", "argmax", "argmin"}


def test_the_warm_up_covers_every_library_backed_call_an_op_makes():
    ops = os.path.join(os.path.dirname(backend_cupy.__file__), "ops")
    called = set()
    for name in os.listdir(ops):
        if name.endswith(".py"):
            with open(os.path.join(ops, name)) as f:
                called |= set(re.findall(r"\bxp\.([a-z_]+)", f.read()))
    warmed = {fn for covered in backend_cupy.WARM_UP.values() for fn in covered}
    assert called & LIBRARY_CALLS, "the scan found no library-backed call at all: it no longer reads the ops"
    assert called & LIBRARY_CALLS <= warmed, f"ops call {sorted(called & LIBRARY_CALLS - warmed)}, which the warm-up does not load"


def test_the_staging_pool_hands_out_aligned_pieces_and_takes_them_back_when_collected():
    buffer = np.zeros(4096, np.uint8)   # pinned memory is page-aligned; pieces are aligned from the buffer's start
    pool = StagingPool(buffer)
    a = pool.take((10,), np.float32)       # 40 bytes: one 256-byte piece
    b = pool.take((2, 300), np.float64)    # 4800 bytes: no room
    assert a.shape == (10,) and a.dtype == np.float32 and b is None and pool.misses == 1
    c = pool.take((512,), np.float64)      # 4096 bytes: more than what is left
    d = pool.take((960,), np.float32)      # 3840 bytes: exactly what is left
    assert c is None and d is not None and pool.free_bytes == 0
    base = buffer.ctypes.data
    assert (a.ctypes.data - base) % 256 == 0 and (d.ctypes.data - base) % 256 == 0 and a.ctypes.data != d.ctypes.data
    a[:] = 1.0
    d[:] = 2.0
    assert (a == 1.0).all()   # the pieces do not overlap
    del a, d
    gc.collect()
    assert pool.free_bytes == 4096   # given back and coalesced: one piece of all of it again
    whole = pool.take((1024,), np.float32)
    assert whole is not None and whole.nbytes == 4096


def _plan(nodes, inputs, outputs, feeds, initializers=()):
    """The CPU plan of one signature and the names its shapes fix, as CudaPlan receives them."""
    m = compile_model(model(nodes, inputs, outputs, initializers))
    m.run(feeds)
    (plan,) = m._plans.values()
    from rtd.kernels.lower import lower_signature  # the static set CudaPlan gets is lower_signature's
    env = m.runner.trace(dict(zip(m.runner.input_names, feeds.values())))
    _, _, static = lower_signature(m.graph, dict(env.maps[0], **feeds), m.disable)
    return plan, static


def test_a_plan_with_static_shapes_is_graphed():
    plan, static = _plan([node("MatMul", ["x", "w"], ["m"]), node("Relu", ["m"], ["y"])], [("x", [2, 3])], [("y", None)],
                         {"x": np.ones((2, 3), np.float32)}, [const("w", np.ones((3, 4), np.float32))])
    assert CudaPlan(plan, static).graphable


@pytest.mark.parametrize("op", ["NonZero", "RandomNormalLike"])
def test_a_plan_whose_shapes_follow_data_or_chance_is_not_graphed(op):
    # a replayed graph would keep the captured run's shapes, or repeat its random numbers
    plan, static = _plan([node(op, ["x"], ["r"]), node("Cast", ["r"], ["y"], to=1)], [("x", [4])], [("y", None)],
                         {"x": np.array([0, 1, 0, 2], np.float32)})
    assert not CudaPlan(plan, static).graphable
