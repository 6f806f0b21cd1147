"""The GEMM convolution's compiled passes (kernels/native/conv.c): im2col equal to the NumPy
windows over odd geometries and 8-bit zero points, the bias/ReLU and requantization epilogues
equal to the NumPy steps they replace (bit for bit: onnxruntime's rounding), refusals for what
they do not take, and lengths checked again at the C boundary."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtd.kernels import native
from rtd.kernels.native import conv as native_conv
from rtd.kernels.ops._quant import requantize
from rtd.kernels.ops._window import geometry

pytestmark = pytest.mark.skipif(native.compiled is None, reason="rtd was installed without its compiled kernels")


def numpy_im2col(x, k, strides, dilations, begin, end, out_shape):
    """(N, C, kh, kw, oh, ow) from a zero-padded copy, tap by tap."""
    padded = np.pad(x, ((0, 0), (0, 0), (begin[0], end[0]), (begin[1], end[1])))
    cols = np.empty(x.shape[:2] + tuple(k) + tuple(out_shape), x.dtype)
    for i in range(k[0]):
        for j in range(k[1]):
            rows = slice(i * dilations[0], i * dilations[0] + (out_shape[0] - 1) * strides[0] + 1, strides[0])
            columns = slice(j * dilations[1], j * dilations[1] + (out_shape[1] - 1) * strides[1] + 1, strides[1])
            cols[:, :, i, j] = padded[:, :, rows, columns]
    return cols


@st.composite
def im2col_cases(draw):
    k = [draw(st.integers(1, 5)), draw(st.integers(1, 5))]
    dilations, strides = [draw(st.integers(1, 3)) for _ in range(2)], [draw(st.integers(1, 4)) for _ in range(2)]
    pads = [draw(st.integers(0, 3)) for _ in range(4)]
    h = draw(st.integers(max(1, (k[0] - 1) * dilations[0] + 1 - pads[0] - pads[2]), 19))
    w = draw(st.integers(max(1, (k[1] - 1) * dilations[1] + 1 - pads[1] - pads[3]), 41))
    dtype = draw(st.sampled_from([np.float32, np.uint8, np.int8]))
    return dict(shape=(draw(st.integers(1, 3)), draw(st.integers(1, 6)), h, w), k=k, strides=strides,
                dilations=dilations, pads=pads, dtype=dtype, seed=draw(st.integers(0, 2**31 - 1)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(im2col_cases())
def test_im2col_equals_the_numpy_windows(case):
    rng = np.random.default_rng(case["seed"])
    dtype = np.dtype(case["dtype"])
    if dtype == np.float32:
        x, zero_point = rng.standard_normal(case["shape"], dtype=np.float32), 0
    else:
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max + 1, case["shape"]).astype(dtype)
        zero_point = int(rng.integers(info.min, info.max + 1))
    out_shape, begin, end = geometry(x.shape[2:], case["k"], case["strides"], case["dilations"], case["pads"])
    cols = np.full(x.shape[:2] + tuple(case["k"]) + tuple(out_shape), np.nan, np.float32)
    compiled = native_conv.Im2col(x.shape, cols, case["k"], case["strides"], case["dilations"], begin, end, out_shape)
    assert compiled.usable and compiled(x, zero_point)
    centred = x.astype(np.float32) - np.float32(zero_point)   # padding is the zero point: 0 once centred
    expected = numpy_im2col(centred, case["k"], case["strides"], case["dilations"], begin, end, out_shape)
    np.testing.assert_array_equal(cols, expected)


def test_im2col_refuses_what_it_was_not_checked_for():
    x = np.ones((1, 2, 5, 5), np.float32)
    cols = np.empty((1, 2, 3, 3, 5, 5), np.float32)
    geometry_args = ([3, 3], [1, 1], [1, 1], [1, 1], [1, 1], [5, 5])
    compiled = native_conv.Im2col(x.shape, cols, *geometry_args)
    assert not compiled(np.ones((1, 2, 5, 6), np.float32))            # another shape than the layout's
    assert not compiled(np.ones((1, 2, 5, 5), np.float64))            # a dtype it has no pass for
    assert not compiled(np.ones((1, 2, 5, 10), np.float32)[..., ::2])  # not contiguous
    assert not native_conv.Im2col(x.shape, cols, [3, 3], [1, 1], [1, 1], [1, 1], [1, 1], [6, 5]).usable  # geometry
    assert not native_conv.Im2col(x.shape, cols, [3, 3], [1 << 30, 1], [1, 1], [1, 1], [1, 1], [5, 5]).usable
    assert not native_conv.Im2col((0, 2, 5, 5), np.empty((0, 2, 3, 3, 5, 5), np.float32), *geometry_args).usable
    assert not native_conv.Im2col(x.shape, cols[..., :4], *geometry_args).usable   # cols of another shape
    assert compiled(x)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 3), st.integers(0, 9), st.integers(0, 70), st.booleans(), st.booleans(), st.integers(0, 2**31 - 1))
def test_bias_relu_equals_numpy(n, m, p, with_bias, relu, seed):
    rng = np.random.default_rng(seed)
    y = rng.standard_normal((n, m, p), dtype=np.float32)
    bias = rng.standard_normal(m, dtype=np.float32) if with_bias else None
    expected = y + (bias.reshape(1, m, 1) if with_bias else np.float32(0))
    expected = np.maximum(expected, 0) if relu else expected
    assert native_conv.bias_relu(y, bias, relu)
    np.testing.assert_array_equal(y, expected)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 2), st.integers(1, 9), st.integers(1, 50), st.sampled_from([np.uint8, np.int8]),
       st.booleans(), st.booleans(), st.integers(0, 2**31 - 1))
def test_requantize_is_bit_exact_with_the_numpy_steps(n, m, p, dtype, with_bias, per_channel, seed):
    """Sums near ties: float32 products that land on .5 must round half to even as onnxruntime does."""
    rng = np.random.default_rng(seed)
    acc = rng.integers(-20000, 20000, (n, m, p)).astype(np.float32)
    bias = rng.integers(-3000, 3000, m).astype(np.int32) if with_bias else None
    multiplier = (rng.integers(1, 64, m if per_channel else 1) / np.float32(128)).astype(np.float32)  # exact halves occur
    info = np.iinfo(dtype)
    zero_point = int(rng.integers(info.min, info.max + 1))
    got = native_conv.requantize(acc, bias, multiplier, zero_point, dtype)
    total = acc.astype(np.int32) + (bias.reshape(1, m, 1) if with_bias else 0)
    expected = requantize(np, total, multiplier.reshape(1, -1, 1), np.array(zero_point, dtype), dtype)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, expected)


def test_epilogues_refuse_other_types_and_shapes():
    y = np.ones((1, 3, 4), np.float32)
    assert not native_conv.bias_relu(y.astype(np.float64), None, True)
    assert not native_conv.bias_relu(y, np.ones(4, np.float32), False)          # bias of another length
    assert not native_conv.bias_relu(np.ones((1, 3, 8), np.float32)[..., ::2], None, True)
    assert native_conv.requantize(y, None, np.ones(2, np.float32), 0, np.uint8) is None   # 2 multipliers for 3 channels
    assert native_conv.requantize(y, np.ones(3, np.int64), np.ones(1, np.float32), 0, np.uint8) is None
    assert native_conv.requantize(y, None, np.ones(1, np.float32), 0, np.int16) is None


def test_the_c_boundary_checks_lengths_itself():
    """A wrapper bug handing wrong lengths gets an error status, not an out-of-bounds access."""
    ffi, lib = native.compiled.ffi, native.compiled.lib
    x, cols = np.ones(2 * 25, np.float32), np.empty(2 * 9 * 25, np.float32)
    buffers = (ffi.from_buffer("float[]", x), x.size, ffi.from_buffer("float[]", cols, require_writable=True))
    geometry_args = (1, 2, 5, 5, 3, 3, 5, 5, 1, 1, 1, 1, 1, 1)
    assert lib.rtd_im2col_f32(*buffers, cols.size, *geometry_args) == 0
    assert lib.rtd_im2col_f32(*buffers, cols.size - 1, *geometry_args) != 0
    assert lib.rtd_im2col_f32(buffers[0], x.size + 1, buffers[2], cols.size, *geometry_args) != 0
    y = np.ones(12, np.float32)
    assert lib.rtd_bias_relu_f32(ffi.from_buffer("float[]", y, require_writable=True), 13, ffi.NULL, 0, 1, 3, 4, 1) != 0
    out = np.empty(12, np.uint8)
    status = lib.rtd_requantize_u8(ffi.from_buffer("float[]", y), 12, ffi.NULL, 0, ffi.from_buffer("float[]", y), 2,
                                   ffi.from_buffer("uint8_t[]", out, require_writable=True), 12, 1, 3, 4, 0)
    assert status != 0   # two multipliers for three channels
