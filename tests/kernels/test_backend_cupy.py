"""The GPU backend's pieces that a host without CuPy or a GPU can exercise: the refusals (one
line, a stable code), the in-memory kernel cache switch, and which plans CudaPlan would
capture as CUDA graphs. What needs a device is in test_gpu_exec.py."""
import os
import subprocess
import sys

import numpy as np
import pytest

from rtd.errors import Code, RtdError
from rtd.kernels import backend_cupy, compile_model
from rtd.kernels.cuda_plan import CudaPlan

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


def test_kernel_cache_stays_in_memory_whatever_the_environment_said():
    env = dict(os.environ, CUPY_CACHE_IN_MEMORY="0")
    done = subprocess.run([sys.executable, "-c", "import os, rtd.kernels; print(os.environ['CUPY_CACHE_IN_MEMORY'])"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "1"


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
