"""Max pooling in native programs (kernels/native/pool.c): tap by tap over each output row (large windows over
small maps separably), it gives the NumPy kernel's values at every geometry (padding, strides, dilations, ceil
mode, windows wholly in the padding, NaN and infinities), and runs at a vectorised loop's speed, not a window-by-window scalar one's."""

import numpy as np
import pytest

import rtd.kernels.plan as plan_module
from rtd.kernels import compile_model
from rtd.kernels.native import compiled
from rtd.kernels.ops._window import geometry
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


@pytest.mark.parametrize("attrs", [dict(kernel_shape=[2, 2], strides=[2, 2]), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
                                   dict(kernel_shape=[2, 2], strides=[1, 1]), dict(kernel_shape=[3, 2], strides=[2, 2], dilations=[1, 2]),
                                   dict(kernel_shape=[2, 3], strides=[1, 2], pads=[0, 1, 1, 0])])
@pytest.mark.parametrize("width", [9, 16, 20, 75, 76, 160])
def test_wide_rows_pool_eight_columns_at_a_time_with_the_kernels_values(attrs, width, monkeypatch):
    """Rows wide enough for the vector blocks (four at once, one, and the last one overlapping the columns
    before it), and rows narrower than a block (one block from the first interior column, its lanes past the
    row dropped), strides 1 and 2, the tensor's last rows read from copies (a height the windows end at): the
    NumPy kernel's values, a NaN in a window staying, and a window holding both zeros giving the sign of its
    first (pool.c keeps the first maximal tap in row-major order, where the NumPy kernel's np.maximum keeps
    the last)."""
    shape = (2, 3, 8 if width < 32 else 9, width)
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape).astype(np.float32)
    x[0, 0, 2, [5, min(40, width - 2), width - 1]] = np.nan
    x[1, 1] = rng.choice(np.float32([0.0, -0.0, -1.0]), size=shape[2:])   # ties of signed zeros everywhere
    onnx_model = _pool_model(shape, attrs)
    ours = compile_model(onnx_model)
    got = [ours.run({"x": x})["y"] for _ in range(2)][-1]   # the first run traces, the second runs the plan
    (plan,) = ours._plans.values()
    assert plan.stats()["native_nodes"] == 1
    with monkeypatch.context() as m:
        m.setattr(plan_module, "emit", lambda *args: None)
        want = [compile_model(onnx_model).run({"x": x})["y"] for _ in range(2)][-1]
    np.testing.assert_array_equal(got, want)
    assert np.isnan(got[0, 0]).any()
    # np.maximum keeps the later of two equal values: over the taps in reverse, the first maximal one
    k, strides, dilations = attrs["kernel_shape"], attrs["strides"], attrs.get("dilations", [1, 1])
    out, begin, end = geometry(shape[2:], k, strides, dilations, attrs.get("pads", [0, 0, 0, 0]))
    padded = np.pad(x[1, 1], ((begin[0], end[0]), (begin[1], end[1])), constant_values=-np.inf)
    taps = [padded[i * dilations[0]:i * dilations[0] + (out[0] - 1) * strides[0] + 1:strides[0],
                   j * dilations[1]:j * dilations[1] + (out[1] - 1) * strides[1] + 1:strides[1]]
            for i in range(k[0]) for j in range(k[1])]
    np.testing.assert_array_equal(np.signbit(got[1, 1]), np.signbit(np.maximum.reduce(taps[::-1])))
