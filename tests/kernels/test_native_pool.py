"""Max pooling in native programs (kernels/native/pool.c): tap by tap over each output row, it gives the
NumPy kernel's values at every geometry (padding, strides, dilations, ceil mode, windows wholly in the
padding, NaN and infinities), and runs at a vectorised loop's speed, not a window-by-window scalar one's."""
import time

import numpy as np
import pytest

import rtd.kernels.plan as plan_module
from rtd.kernels import compile_model, native
from rtd.kernels.native import compiled
from tests.kernels.kernel_graphs import model, node

pytestmark = pytest.mark.skipif(compiled is None, reason="the compiled kernels are not built: no native programs to run")

GEOMETRIES = [dict(kernel_shape=[2, 2], strides=[1, 1], auto_pad="SAME_UPPER"),
              dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
              dict(kernel_shape=[3, 2], strides=[2, 3], pads=[2, 0, 1, 1], dilations=[2, 1], ceil_mode=1),
              dict(kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
              dict(kernel_shape=[1, 3], strides=[1, 1], pads=[0, 2, 0, 2], dilations=[1, 3])]


def _pool_model(shape, attrs):
    return model([node("MaxPool", ["x"], ["y"], **attrs)], [("x", list(shape))], [("y", None)])


@pytest.mark.parametrize("attrs", GEOMETRIES)
@pytest.mark.parametrize("threads", [1, 2])
def test_native_max_pool_gives_the_numpy_kernels_values(attrs, threads, monkeypatch):
    shape = (2, 3, 11, 13)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    x[0, 0, 0, :4] = [np.nan, -np.inf, 0.0, np.inf]
    x[1, 2, 5, 5] = np.nan
    onnx_model = _pool_model(shape, attrs)
    native.set_threads(threads)
    try:
        ours = compile_model(onnx_model)
        got = [ours.run({"x": x})["y"] for _ in range(2)][-1]
    finally:
        native.set_threads(1)
    (plan,) = ours._plans.values()
    assert plan.stats()["native_nodes"] == 1
    with monkeypatch.context() as m:
        m.setattr(plan_module, "emit", lambda *args: None)
        want = compile_model(onnx_model).run({"x": x})["y"]
    np.testing.assert_array_equal(got, want)


def test_native_max_pool_runs_at_a_vectorised_loops_speed():
    """A 2x2 pool over a 16x368x368 map (PP-OCRv6's detector) within a few times NumPy's maximum of two
    shifted views of the same map: window by window it took over 20 times that."""
    shape = (1, 16, 368, 368)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    ours = compile_model(_pool_model(shape, GEOMETRIES[0]))
    ours.run({"x": x})

    def best(run):
        times = []
        for _ in range(7):
            start = time.thread_time()
            run()
            times.append(time.thread_time() - start)
        return min(times)
    pooled = best(lambda: ours.run({"x": x}))
    shifted = best(lambda: np.maximum(np.maximum(x[..., :-1, :-1], x[..., 1:, :-1]), np.maximum(x[..., :-1, 1:], x[..., 1:, 1:])))
    assert pooled < 4 * shifted, (pooled, shifted)
