"""Max pooling in native programs (kernels/native/pool.c): tap by tap over each output row (large windows over
small maps separably), it gives the NumPy kernel's values at every geometry (padding, strides, dilations, ceil
mode, windows wholly in the padding, NaN and infinities), and runs at a vectorised loop's speed, not a window-by-window scalar one's."""

import numpy as np
import pytest

import rtd.kernels.plan as plan_module
from rtd.kernels import compile_model
from rtd.kernels.native import compiled
from tests.kernels.kernel_graphs import model, node

pytestmark = pytest.mark.skipif(compiled is None, reason="the compiled kernels are not built: no native programs to run")

GEOMETRIES = [dict(kernel_shape=[2, 2], strides=[1, 1], auto_pad="SAME_UPPER"),
              dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
              dict(kernel_shape=[3, 2], strides=[2, 3], pads=[2, 0, 1, 1], dilations=[2, 1], ceil_mode=1),
              dict(kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
              dict(kernel_shape=[1, 3], strides=[1, 1], pads=[0, 2, 0, 2], dilations=[1, 3]),
              # 16 taps or more over a small map: row maxima first, then along the window's rows (pool.c)
              dict(kernel_shape=[5, 5], strides=[1, 1], pads=[2, 2, 2, 2]),
              dict(kernel_shape=[13, 9], strides=[1, 1], pads=[6, 4, 6, 4]),
              dict(kernel_shape=[2, 17], strides=[1, 1], pads=[1, 16, 0, 8]),   # windows wholly in the padding
              dict(kernel_shape=[4, 5], strides=[2, 1], pads=[1, 2, 3, 2], dilations=[1, 2], ceil_mode=1),
              dict(kernel_shape=[3, 5], strides=[2, 1], pads=[1, 2, 0, 1], dilations=[1, 2], ceil_mode=1)]


def _pool_model(shape, attrs):
    return model([node("MaxPool", ["x"], ["y"], **attrs)], [("x", list(shape))], [("y", None)])


@pytest.mark.parametrize("attrs", GEOMETRIES)
@pytest.mark.parametrize("threads", [1, 2])
def test_native_max_pool_gives_the_numpy_kernels_values(attrs, threads, monkeypatch, native_threads):
    shape = (2, 3, 11, 13)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    x[0, 0, 0, :4] = [np.nan, -np.inf, 0.0, np.inf]
    x[1, 2, 5, 5] = np.nan
    onnx_model = _pool_model(shape, attrs)
    native_threads(threads)
    ours = compile_model(onnx_model)
    got = [ours.run({"x": x})["y"] for _ in range(2)][-1]
    (plan,) = ours._plans.values()
    assert plan.stats()["native_nodes"] == 1
    native_threads(1)   # the reference on one thread
    with monkeypatch.context() as m:
        m.setattr(plan_module, "emit", lambda *args: None)
        want = compile_model(onnx_model).run({"x": x})["y"]
    np.testing.assert_array_equal(got, want)
