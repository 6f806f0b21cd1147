"""The compiled 2-D convolution (kernels/native/conv.c: rtd's own GEMM over an implicit im2col of a
padded, phase-split copy, epilogue in one call): equal to an independent NumPy convolution over odd
geometries, groups, strides, dilations and pads; bit-exact requantization (onnxruntime's rounding) for 8-bit inputs and outputs;
refusals for what it does not take; lengths checked again at the C boundary."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtd.kernels import native
from rtd.kernels.ir import Node
from rtd.kernels.native import conv as native_conv
from rtd.kernels.native.chain import Program
from rtd.kernels.ops._quant import requantize
from rtd.kernels.ops._window import geometry

pytestmark = pytest.mark.skipif(native_conv.compiled is None, reason="rtd was installed without its compiled kernels")


def numpy_conv(x, w, group, strides, dilations, begin, end, out_shape):
    """float64 sums of x (N, C, H, W) ⊛ w (M, C/group, kh, kw): a padded copy and one einsum per group."""
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (begin[0], end[0]), (begin[1], end[1])))
    (kh, kw), (oh, ow) = w.shape[2:], out_shape
    windows = np.empty(x.shape[:2] + (kh, kw, oh, ow))
    for i in range(kh):
        for j in range(kw):
            windows[:, :, i, j] = padded[:, :, i * dilations[0]:i * dilations[0] + (oh - 1) * strides[0] + 1:strides[0],
                                         j * dilations[1]:j * dilations[1] + (ow - 1) * strides[1] + 1:strides[1]]
    cg, mg = x.shape[1] // group, w.shape[0] // group
    return np.concatenate([np.einsum("nckhyx,mckh->nmyx", windows[:, g * cg:(g + 1) * cg], w[g * mg:(g + 1) * mg])
                           for g in range(group)], axis=1)


@st.composite
def conv_cases(draw):
    k = [draw(st.integers(1, 4)), draw(st.integers(1, 4))]
    dilations, strides = [draw(st.integers(1, 3)) for _ in range(2)], [draw(st.integers(1, 3)) for _ in range(2)]
    pads = [draw(st.integers(0, 3)) for _ in range(4)]
    h = draw(st.integers(max(1, (k[0] - 1) * dilations[0] + 1 - pads[0] - pads[2]), 17))
    w = draw(st.integers(max(1, (k[1] - 1) * dilations[1] + 1 - pads[1] - pads[3]), 37))
    group = draw(st.integers(1, 3))
    return dict(n=draw(st.integers(1, 2)), c=group * draw(st.integers(1, 3)), m=group * draw(st.integers(1, 4)),
                h=h, w=w, group=group, k=k, strides=strides, dilations=dilations, pads=pads,
                seed=draw(st.integers(0, 2**31 - 1)))


def compiled_for(case, x_shape, w_shape):
    out_shape, begin, end = geometry(x_shape[2:], case["k"], case["strides"], case["dilations"], case["pads"])
    conv = native_conv.Conv2d(x_shape, w_shape, case["group"], case["k"], case["strides"], case["dilations"],
                              begin, end, out_shape)
    assert conv.usable
    return conv, (case["strides"], case["dilations"], begin, end, out_shape)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conv_cases(), st.booleans(), st.booleans())
def test_float_convolution_equals_numpy(case, with_bias, relu):
    rng = np.random.default_rng(case["seed"])
    x = rng.standard_normal((case["n"], case["c"], case["h"], case["w"]), dtype=np.float32)
    w = rng.standard_normal((case["m"], case["c"] // case["group"], *case["k"]), dtype=np.float32)
    bias = rng.standard_normal(case["m"], dtype=np.float32) if with_bias else None
    conv, geometry_args = compiled_for(case, x.shape, w.shape)
    y = conv(x, w, bias, relu)
    expected = numpy_conv(x, w, case["group"], *geometry_args) + (bias.reshape(1, -1, 1, 1) if with_bias else 0)
    expected = np.maximum(expected, 0) if relu else expected
    assert y.dtype == np.float32 and y.shape == expected.shape
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(expected).max())))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conv_cases(), st.sampled_from([np.uint8, np.int8]), st.sampled_from([np.uint8, np.int8]), st.booleans(),
       st.booleans())
def test_eight_bit_convolution_requantizes_bit_exactly(case, x_dtype, y_dtype, with_bias, per_channel):
    """Padding is the zero point (0 once centred); sums exact; products landing on .5 round half to even."""
    rng = np.random.default_rng(case["seed"])
    info = np.iinfo(x_dtype)
    x = rng.integers(info.min, info.max + 1, (case["n"], case["c"], case["h"], case["w"])).astype(x_dtype)
    x_zero_point = int(rng.integers(info.min, info.max + 1))
    w = rng.integers(-127, 128, (case["m"], case["c"] // case["group"], *case["k"])).astype(np.float32)
    bias = rng.integers(-3000, 3000, case["m"]).astype(np.int32) if with_bias else None
    multiplier = (rng.integers(1, 64, case["m"] if per_channel else 1) / np.float32(4096)).astype(np.float32)
    y_info = np.iinfo(y_dtype)
    y_zero_point = int(rng.integers(y_info.min, y_info.max + 1))
    conv, geometry_args = compiled_for(case, x.shape, w.shape)
    y = conv(x, w, bias, x_zero_point=x_zero_point, requantize=(multiplier, y_zero_point, np.dtype(y_dtype)))
    sums = numpy_conv(x.astype(np.float64) - x_zero_point, w, case["group"], *geometry_args).astype(np.int32)
    if with_bias:
        sums += bias.reshape(1, -1, 1, 1)
    expected = requantize(np, sums, multiplier.reshape(1, -1, 1, 1), np.array(y_zero_point, y_dtype), y_dtype)
    assert y.dtype == y_dtype
    np.testing.assert_array_equal(y, expected)


def test_what_it_was_not_checked_for_is_refused_not_guessed():
    x, w = np.ones((1, 2, 5, 5), np.float32), np.ones((3, 2, 3, 3), np.float32)
    geometry_args = ([3, 3], [1, 1], [1, 1], [1, 1], [1, 1], [5, 5])
    conv = native_conv.Conv2d(x.shape, w.shape, 1, *geometry_args)
    assert conv(x, w) is not None
    assert conv(np.ones((1, 2, 5, 6), np.float32), w) is None              # another shape than the layout's
    assert conv(x.astype(np.float64), w) is None                           # a dtype it has no pass for
    assert conv(np.ones((1, 2, 5, 10), np.float32)[..., ::2], w) is None   # not contiguous
    assert conv(x, w.astype(np.float64)) is None
    assert conv(x, w, np.ones(4, np.float32)) is None                      # a bias of another length
    assert conv(x, w, requantize=(np.ones(2, np.float32), 0, np.dtype(np.uint8))) is None   # 2 multipliers, 3 channels
    assert conv(x, w, np.ones(3, np.float32), requantize=(np.ones(1, np.float32), 0, np.dtype(np.uint8))) is None
    assert conv(x, w, requantize=(np.ones(1, np.float32), 0, np.dtype(np.int16))) is None
    for args in ([w.shape, 1, [3, 3], [1, 1], [1, 1], [1, 1], [1, 1], [6, 5]],        # output size does not follow
                 [w.shape, 1, [3, 3], [1 << 30, 1], [1, 1], [1, 1], [1, 1], [5, 5]],  # a stride past the bound
                 [(3, 1, 3, 3), 1, *geometry_args],                                   # weights do not fit the channels
                 [w.shape, 2, *geometry_args]):                                       # 3 filters in 2 groups
        assert not native_conv.Conv2d(x.shape, *args).usable
    assert not native_conv.Conv2d((1, 2, 0, 5), w.shape, 1, *geometry_args).usable


def test_the_c_boundary_checks_lengths_itself():
    """A wrapper bug handing wrong lengths gets an error status, not an out-of-bounds access, at stride 1 and 2."""
    ffi, lib = native.compiled.ffi, native.compiled.lib
    x, w, half = np.ones(2 * 25, np.float32), np.ones(3 * 18, np.float32), np.full(1, 0.5, np.float32)
    for stride, out in ((1, 5), (2, 3)):
        y = np.empty(3 * out * out, np.float32)
        geometry = (1, 2, 5, 5, 3, 1, 3, 3, out, out, stride, stride, 1, 1, 1, 1)
        needed = lib.rtd_conv2d_scratch(*geometry, 0, 0)
        assert needed > 0
        scratch = np.empty(needed + 64, np.float32)
        packed_len = lib.rtd_conv2d_packed_weights(3, 1, 18)
        assert packed_len == 16 * 18   # one panel of 16 channels, 3 of them real
        packed = np.empty(packed_len + 64, np.float32)

        def call(x_len=x.size, w_len=w.size, y_len=y.size, scratch_len=needed, packed_len=packed_len, y_type=0, y=y,
                 scratch=scratch, packed=packed, geometry=geometry, links=ffi.NULL, params=ffi.NULL, n_links=0,
                 chain_inputs=None):
            return lib.rtd_conv2d(ffi.from_buffer("float[]", x), 0, x_len, 0, ffi.from_buffer("float[]", w), w_len,
                                  ffi.NULL, ffi.NULL, 0, ffi.NULL, 0, 0, ffi.from_buffer("char[]", y, require_writable=True),
                                  y_type, y_len, ffi.from_buffer("float[]", scratch, require_writable=True), scratch_len,
                                  ffi.from_buffer("float[]", packed, require_writable=True), packed_len, 1,
                                  links, params, n_links, chain_inputs or [ffi.NULL, ffi.from_buffer("float[]", half)], [0, 1], 2,
                                  *geometry, 0)
        assert call() == 0
        assert call(x_len=x.size + 1) != 0
        assert call(w_len=w.size - 1) != 0
        assert call(y_len=y.size + 1) != 0
        assert call(scratch_len=needed - 1) != 0
        assert call(packed_len=packed_len - 1) != 0
        assert call(y_type=1) != 0         # 8-bit output from a float input
        mul = ffi.from_buffer("int32_t[]", np.array([2, 0, 1, -2], np.int32))   # Mul(output, input 1)
        zeros = ffi.from_buffer("float[]", np.zeros(2, np.float32))
        assert call(links=mul, params=zeros, n_links=1) == 0
        assert call(links=ffi.from_buffer("int32_t[]", np.array([2, 0, 2, -2], np.int32)), params=zeros, n_links=1) != 0
        assert call(links=ffi.from_buffer("int32_t[]", np.array([99, 0, 1, -2], np.int32)), params=zeros, n_links=1) != 0


def test_kept_panels_are_used_only_for_the_weights_they_were_made_from():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 8, 12, 12), dtype=np.float32)
    w1, w2 = (rng.standard_normal((20, 8, 3, 3), dtype=np.float32) for _ in range(2))
    conv = native_conv.Conv2d(x.shape, w1.shape, 1, [3, 3], [1, 1], [1, 1], [1, 1], [1, 1], [12, 12])
    first = conv(x, w1, constant=w1)
    np.testing.assert_array_equal(conv(x, w1), first)                                # packed anew: the same bits
    np.testing.assert_array_equal(conv(x, w1, constant=w1), first)                   # from the kept panels
    np.testing.assert_array_equal(conv(x, w2, constant=w2), conv(x, w2))             # other weights: their own
    np.testing.assert_array_equal(conv(x, w1[:, :, :, :], constant=w1), first)       # a view of the kept weights


def test_threads_split_the_work_and_change_no_result(native_threads):
    """With two threads the GEMM's columns are shared out, or its rows (a small map, many channels); the outputs
    are those of one thread, float and 8-bit alike, stride 1 and 2, and the tenant's limit is restored after."""
    rng = np.random.default_rng(4)
    for size, stride in ((40, 1), (40, 2), (6, 1), (8, 2)):
        x = rng.standard_normal((2, 16, size, size), dtype=np.float32)
        xq = rng.integers(0, 256, x.shape).astype(np.uint8)
        m = 32 if size > 10 else 256   # a small map with many channels: few units, the GEMM shared out
        w = rng.standard_normal((m, 16, 3, 3), dtype=np.float32)
        wq = rng.integers(-127, 128, w.shape).astype(np.float32)
        bias = rng.standard_normal(m, dtype=np.float32)
        requantize = (np.full(1, 1 / 512, np.float32), 3, np.dtype(np.uint8))
        out = (size + 2 - 3) // stride + 1
        results = {}
        for threads in (1, 2):
            native_threads(threads)
            conv = native_conv.Conv2d(x.shape, w.shape, 1, [3, 3], [stride] * 2, [1, 1], [1, 1], [1, 1], [out, out])
            results[threads] = (conv(x, w, bias, True), conv(xq, wq, None, x_zero_point=128, requantize=requantize))
            assert native.threads() == threads
        np.testing.assert_array_equal(results[2][0], results[1][0])   # a split changes no output's sum order
        np.testing.assert_array_equal(results[2][1], results[1][1])


@pytest.mark.parametrize("k, group", [(1, 1), (1, 2), (3, 1), (3, 2)])
def test_a_batch_of_small_maps_is_shared_out_by_image(native_threads, k, group):
    """A batch of small maps (a classifier's 6 text lines): 1x1 convolutions run whole per-image GEMMs on each
    thread, unpadded 3x3 ones one job over every image's tiles. The outputs are numpy's, with a fused chain,
    and those of one thread, bit for bit."""
    rng = np.random.default_rng(11)
    n, c, m, h, w_ = 6, 32, 40, 5, 41
    x = rng.standard_normal((n, c, h, w_), dtype=np.float32)
    w = rng.standard_normal((m, c // group, k, k), dtype=np.float32)
    bias = rng.standard_normal(m, dtype=np.float32)
    shift = rng.standard_normal((m, 1, 1), dtype=np.float32)
    program = Program.build([(Node("Add", "", [], [], {}), [0, 1])], 2, np.float32)   # y + shift[channel]
    out = [h - k + 1, w_ - k + 1]
    results = {}
    for threads in (1, 2):
        native_threads(threads)
        conv = native_conv.Conv2d(x.shape, w.shape, group, [k, k], [1, 1], [1, 1], [0, 0], [0, 0], out)
        results[threads] = conv(x, w, bias, relu=True, chain=(program, [None, shift]))
    want = np.maximum(numpy_conv(x, w, group, [1, 1], [1, 1], [0, 0], [0, 0], out) + bias.reshape(m, 1, 1), 0) + shift
    np.testing.assert_allclose(results[1], want, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(results[2], results[1])


@pytest.mark.parametrize("k, pads", [(1, 0), (3, 1)])   # 1x1 unpadded: the GEMM's epilogue; 3x3: the direct tiles'
def test_a_fused_chain_gives_the_bits_of_the_chain_run_after(k, pads):
    """Conv + Relu, then x * sigmoid(x) * scale[channel] + shift: run on the tiles, the same bits as the same
    compiled chain run over the finished output."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 24, 13, 11), dtype=np.float32)
    w = rng.standard_normal((37, 24, k, k), dtype=np.float32)
    bias = rng.standard_normal(37, dtype=np.float32)
    scale, shift = rng.standard_normal((37, 1, 1), dtype=np.float32), np.float32([0.25])
    links = [(Node("Sigmoid", "", [], [], {}), [0]), (Node("Mul", "", [], [], {}), [0, -1]),
             (Node("Mul", "", [], [], {}), [-1, 1]), (Node("Add", "", [], [], {}), [-1, 2])]
    program = Program.build(links, 3, np.float32)
    out = (13 + 2 * pads - k) + 1, (11 + 2 * pads - k) + 1
    conv = native_conv.Conv2d(x.shape, w.shape, 1, [k, k], [1, 1], [1, 1], [pads] * 2, [pads] * 2, list(out))
    plain = conv(x, w, bias, relu=True)
    want = np.empty_like(plain)
    assert program([plain, scale, shift], want) is want
    fused = conv(x, w, bias, relu=True, chain=(program, [None, scale, shift]))
    np.testing.assert_array_equal(fused, want)


def test_a_one_pixel_map_is_dot_products_with_the_epilogue_and_chain():
    """A 1x1 convolution over a 1x1 map (an SE block's squeeze and excite): a dot product per output channel,
    then bias, ReLU and a fused chain (the output, a scalar, a per-channel input), for every group."""
    rng = np.random.default_rng(9)
    n, c, m, group = 2, 40, 24, 2
    x = rng.standard_normal((n, c, 1, 1)).astype(np.float32)
    w = rng.standard_normal((m, c // group, 1, 1)).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32)
    scale = rng.standard_normal((m, 1, 1)).astype(np.float32)
    links = [(Node("Mul", "", [], [], {}), [0, 1]), (Node("Add", "", [], [], {}), [-1, 2])]   # y * 3 + scale
    program = Program.build(links, 3, np.float32)
    layout = native_conv.Conv2d(x.shape, w.shape, group, [1, 1], [1, 1], [1, 1], [0, 0], [0, 0], [1, 1])
    y = layout(x, w, bias, relu=True, chain=(program, [None, np.array(3, np.float32), scale]))
    sums = np.einsum("ngk,gmk->ngm", x.reshape(n, group, c // group).astype(np.float64),
                     w.reshape(group, m // group, c // group).astype(np.float64)).reshape(n, m) + bias
    want = np.maximum(sums, 0) * 3 + scale.reshape(m)
    np.testing.assert_allclose(y.reshape(n, m), want, rtol=1e-5, atol=1e-5)


def test_a_strided_input_takes_the_compiled_pass_not_a_numpy_im2col():
    """A transposed (NHWC → NCHW) input is not contiguous: the Conv copies it once for the compiled pass.
    The NumPy fallback would build an im2col buffer k·k times the input (basic_pitch's 3×39 conv: 170 MB)."""
    from rtd.kernels.ops import _conv
    from rtd.kernels.ops._window import per_thread
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 20, 30, 8), dtype=np.float32).transpose(0, 3, 1, 2)   # a view, as a Transpose leaves it
    w = rng.standard_normal((8, 8, 3, 9), dtype=np.float32)
    pads = [1, 4, 1, 4]
    y = _conv.conv(np, x, w, None, 1, [3, 9], [1, 1], [1, 1], pads, "NOTSET")
    out_shape, begin, end = geometry(x.shape[2:], [3, 9], [1, 1], [1, 1], pads)
    np.testing.assert_allclose(y, numpy_conv(x, w, 1, [1, 1], [1, 1], begin, end, out_shape), rtol=1e-4, atol=1e-4)
    key = ("conv-layout", x.shape, np.dtype(np.float32), w.shape, 1, (3, 9), (1, 1), (1, 1), tuple(pads), "NOTSET", "numpy")
    layout = per_thread(key, lambda: None)
    assert layout.compiled is not None and layout.cols is None   # the NumPy plan's buffers were never made
