"""The quantized reference (quantized_reference.py) against NumPy's int64 sums, on this host's onnxruntime:
exact for uint8 × int8 products over the whole int8 range (re-expressed where this host saturates),
the model as written, and still exact, for weights within ±PAIR_SAFE_WEIGHT; int8 activations untouched.
First, the cause itself: this host's u8s8 MatMulInteger is exact, or saturates each pair in int16."""
import numpy as np
import onnxruntime
import pytest
from numpy.lib.stride_tricks import sliding_window_view
from onnx import TensorProto, helper, numpy_helper

from tests.kernels.quantized_reference import PAIR_SAFE_WEIGHT, onnxruntime_reference, u8s8_saturates

RNG = np.random.default_rng(23)


def one_node(op, activation, constants, out_type, **attrs) -> bytes:
    """`op` over a fed activation "x" and initializers c0..; None leaves an optional input out."""
    names = [f"c{i}" if c is not None else "" for i, c in enumerate(constants)]
    graph = helper.make_graph(
        [helper.make_node(op, ["x", *names], ["y"], **attrs)], op,
        [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(activation.dtype), activation.shape)],
        [helper.make_tensor_value_info("y", out_type, None)],
        [numpy_helper.from_array(np.asarray(c), n) for c, n in zip(constants, names) if c is not None])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10).SerializeToString()


def extreme_u8(shape):
    """uint8 activations with whole rows at 255 (the largest products) and the rest random."""
    a = RNG.integers(0, 256, shape).astype(np.uint8)
    a.reshape(-1, shape[-1])[::3] = 255
    return a


def weights(shape, lo, hi, out_axis):
    """int8 weights in [lo, hi], the first output channel all hi and the second all lo."""
    w = RNG.integers(lo, hi + 1, shape).astype(np.int8)
    np.moveaxis(w, out_axis, 0)[:2] = np.array([hi, lo], np.int8).reshape((2,) + (1,) * (len(shape) - 1))
    return w


# int8 weights over the whole range, and within ±PAIR_SAFE_WEIGHT (no two u8·s8 products leave int16)
RANGES = [pytest.param((-128, 127), id="whole_int8"), pytest.param((-PAIR_SAFE_WEIGHT, PAIR_SAFE_WEIGHT), id="pairs_within_int16")]


def test_this_hosts_u8s8_product_is_exact_or_saturates_each_pair_in_int16():
    """Rows of a constant r and columns of b constant c make every pair of products 2·r·c whatever
    the pairing: the sum is K·r·c, or (K/2)·clip(2·r·c) to int16 where u8s8_saturates()."""
    k, r, c = 40, np.arange(0, 256, 15, dtype=np.int64), np.arange(-128, 128, 17, dtype=np.int64)
    a, b = np.repeat(r[:, None], k, 1).astype(np.uint8), np.repeat(c[None, :], k, 0).astype(np.int8)
    got = onnxruntime.InferenceSession(one_node("MatMulInteger", a, [b], TensorProto.INT32),
                                       providers=["CPUExecutionProvider"]).run(None, {"x": a})[0]
    pair = 2 * r[:, None] * c[None, :]
    want = k // 2 * (np.clip(pair, -32768, 32767) if u8s8_saturates() else pair)
    np.testing.assert_array_equal(got, want)
    assert (np.abs(pair) > 32767).any()   # the grid reaches past int16


@pytest.mark.parametrize("span", RANGES)
@pytest.mark.parametrize("zero_points", [True, False])
def test_matmul_integer_reference_is_exact(span, zero_points):
    a, b = extreme_u8((6, 40)), weights((40, 5), *span, out_axis=1)
    a_zp, b_zp = (np.uint8(131), np.int8(-3)) if zero_points else (None, None)
    reference = onnxruntime_reference(one_node("MatMulInteger", a, [b, a_zp, b_zp], TensorProto.INT32))
    exact = (a.astype(np.int64) - (a_zp or 0)) @ (b.astype(np.int64) - (b_zp or 0))
    np.testing.assert_array_equal(reference.run({"x": a})[0], exact, err_msg=str(reference))
    assert bool(reference.reexpressed) == (span[0] < -PAIR_SAFE_WEIGHT and u8s8_saturates()), reference


@pytest.mark.parametrize("span", RANGES)
@pytest.mark.parametrize("per_channel", [False, True])
def test_qlinear_conv_reference_is_exact(span, per_channel):
    """Scales 1, 1 and 2^14: the requantization is an exact division by a power of two, so NumPy's
    rint((x - x_zp) ⊛ w / 2^14) + y_zp, clipped, is the result bit for bit."""
    x, w = extreme_u8((1, 16, 7, 9)), weights((6, 16, 3, 3), *span, out_axis=0)
    w_scale = np.ones(6, np.float32) if per_channel else np.float32(1)
    w_zp = np.zeros(6, np.int8) if per_channel else np.int8(0)
    model = one_node("QLinearConv", x, [np.float32(1), np.uint8(128), w, w_scale, w_zp, np.float32(2 ** 14), np.uint8(100)],
                     TensorProto.UINT8, pads=[1, 1, 1, 1])
    reference = onnxruntime_reference(model)
    centred = np.pad(x.astype(np.int64) - 128, ((0, 0), (0, 0), (1, 1), (1, 1)))
    acc = np.einsum("nchwij,mcij->nmhw", sliding_window_view(centred, (3, 3), axis=(2, 3)), w.astype(np.int64))
    exact = np.clip(np.rint(acc / 2 ** 14) + 100, 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(reference.run({"x": x})[0], exact, err_msg=str(reference))
    assert bool(reference.reexpressed) == (span[0] < -PAIR_SAFE_WEIGHT and u8s8_saturates()), reference


def test_int8_activations_keep_the_model_as_written():
    a, b = RNG.integers(-128, 128, (4, 16)).astype(np.int8), weights((16, 3), -128, 127, out_axis=1)
    reference = onnxruntime_reference(one_node("MatMulInteger", a, [b], TensorProto.INT32))
    assert not reference.reexpressed
    np.testing.assert_array_equal(reference.run({"x": a})[0], a.astype(np.int64) @ b.astype(np.int64))
