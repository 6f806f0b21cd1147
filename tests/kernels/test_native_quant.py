"""The compiled range and per-tensor quantization (kernels/native/quant.py, quant.c) that DynamicQuantizeLinear
runs on float32 NumPy arrays: they are taken, the range is np.min's and np.max's (NaN and infinities included),
and the bytes equal the spec's reference (onnx.reference) and the kernel's own NumPy passes, ties at .5 and
values past the range's ends included."""
import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from rtd.kernels import compile_model, native
from rtd.kernels.native import quant
from rtd.kernels.ops.op_dynamic_quantize_linear import DynamicQuantizeLinear_11

pytestmark = pytest.mark.skipif(native.compiled is None, reason="rtd was installed without its compiled kernels")


def _inputs():
    rng = np.random.default_rng(19)
    yield rng.standard_normal((96, 96, 64), dtype=np.float32) * 3                 # an attention's tanh scale
    yield rng.uniform(0, 7, (3, 1000)).astype(np.float32)                         # no negatives: zero point 0
    yield -rng.uniform(0, 7, (3, 1000)).astype(np.float32)                        # no positives: zero point 255
    yield (np.arange(-1020, 1021, dtype=np.float32) / 4)                          # many exact ties at .5
    yield np.float32([[0.0, -0.0, 1e-38, -1e-38, 1e38, -1e38]])


@pytest.mark.parametrize("x", list(_inputs()), ids=range(5))
def test_dynamic_quantize_linear_takes_the_compiled_pass_and_gives_the_specs_bytes(x):
    kernel = DynamicQuantizeLinear_11({}, np)
    y, scale, zero_point = kernel.run(x)
    assert quant.quantize(x, scale, int(zero_point), np.uint8) is not None   # the compiled passes are the ones taken
    assert quant.value_range(x) is not None
    graph = helper.make_graph([helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "scale", "zp"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info(n, t, None) for n, t in
                               (("y", TensorProto.UINT8), ("scale", TensorProto.FLOAT), ("zp", TensorProto.UINT8))])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    want = ReferenceEvaluator(proto).run(None, {"x": x})
    for got, expected in zip((y, scale, zero_point), want):
        assert np.asarray(got).dtype == expected.dtype and np.array_equal(got, expected)
    strided = np.repeat(x, 2, axis=-1)[..., ::2]   # not contiguous: the NumPy passes
    assert quant.quantize(strided, scale, int(zero_point), np.uint8) is None
    np.testing.assert_array_equal(kernel.run(strided)[0], y)
    np.testing.assert_array_equal(compile_model(proto).run({"x": x})["y"], y)


@pytest.mark.parametrize("size", [1, 7, 8, 9, 4099])
def test_the_range_is_np_min_and_np_max_nan_included(size):
    rng = np.random.default_rng(size)
    for trial in range(20):
        x = rng.standard_normal(size, dtype=np.float32) * np.float32(10.0 ** rng.integers(-3, 4))
        if trial % 4 == 1:
            x[rng.integers(size)] = np.nan
        if trial % 4 == 2:
            x[rng.integers(size)] = rng.choice([np.inf, -np.inf])
        got = quant.value_range(x)
        assert got is not None
        np.testing.assert_array_equal(got, (x.min(), x.max()))
    assert quant.value_range(np.empty(0, np.float32)) is None


@pytest.mark.parametrize("threads", [2, 3])
def test_threads_share_a_large_tensor_and_give_one_threads_answer(threads, native_threads):
    rng = np.random.default_rng(threads)
    x = rng.standard_normal(400_003, dtype=np.float32) * 5   # past the per-thread minimum three times over
    want_bytes = quant.quantize(x, np.float32(0.04), 128, np.uint8)
    native_threads(threads)
    np.testing.assert_array_equal(quant.quantize(x, np.float32(0.04), 128, np.uint8), want_bytes)
    np.testing.assert_array_equal(quant.value_range(x), (x.min(), x.max()))
    for at in (0, 200_001, 400_002):   # a NaN in the first, a middle and the last share makes both ends NaN
        y = x.copy()
        y[at] = np.nan
        assert np.isnan(quant.value_range(y)).all()
    extreme = x.copy()
    extreme[399_999] = np.inf   # the last share's end, where share order matters if the combination were wrong
    np.testing.assert_array_equal(quant.value_range(extreme), (x.min(), np.inf))
    graph = helper.make_graph([helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])], "g",
                              [helper.make_tensor_value_info("q", TensorProto.UINT8, [x.size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [helper.make_tensor("s", TensorProto.FLOAT, [], [0.04]), helper.make_tensor("z", TensorProto.UINT8, [], [128])])
    model = compile_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    for _ in range(2):   # the traced run, then the plan's compiled dequantization on the threads
        got = model.run({"q": want_bytes})["y"]
    np.testing.assert_array_equal(got, (want_bytes.astype(np.int32) - 128).astype(np.float32) * np.float32(0.04))

def test_only_float32_arrays_into_eight_bits_are_taken():
    x = np.ones(16, np.float32)
    assert quant.quantize(x.astype(np.float64), 1.0, 0, np.uint8) is None
    assert quant.quantize(x, 1.0, 0, np.int16) is None
    np.testing.assert_array_equal(quant.quantize(x * -3, np.float32(0.5), 3, np.int8), np.full(16, -3, np.int8))


@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (5, 7, 3), (22, 1024, 130), (70, 513, 17), (9, 32768, 2), (3, 600, 40)])
def test_the_8bit_product_is_numpys_exact_one_with_extreme_bytes(m, k, n, native_threads):
    """Every row count past the kernel's tiles of four rows, column counts past its strips of 16, odd k (a pair
    short), k past a strip's 512 (sums carried across passes), the widest k it takes, the bytes at their ends
    (|a - zp| and |w - zp| 255: the largest sums), per-tensor and per-column zero points, one thread and two alike.
    int8 weights with zero points 0 take the byte path: their extreme weights make most pairs of k ones it must cut."""
    rng = np.random.default_rng(m * k + n)
    cases = ((np.uint8, 0, np.int8, -128), (np.uint8, 255, np.uint8, 0), (np.int8, -128, np.uint8, 255),
             (np.int8, 127, np.int8, 127), (np.uint8, 119, np.uint8, None),
             (np.uint8, 255, np.int8, 0), (np.int8, -128, np.int8, 0), (np.uint8, 3, np.int8, None))   # int8 w, zero 0: bytes
    for a_dtype, zero, w_dtype, w_zero in cases:
        a_info, w_info = np.iinfo(a_dtype), np.iinfo(w_dtype)
        a = rng.choice(np.array([a_info.min, a_info.max, 0], a_dtype), (m, k)) if k == 32768 else \
            rng.integers(a_info.min, a_info.max + 1, (m, k), dtype=a_dtype)
        w = rng.choice(np.array([w_info.min, w_info.max, 1], w_dtype), (k, n))
        w_zeros = np.array([w_zero], w_dtype) if w_zero is not None else np.zeros(n, w_dtype) if w_dtype == np.int8 \
            else rng.integers(w_info.min, w_info.max + 1, n, dtype=w_dtype)
        want = (a.astype(np.int64) - zero) @ (w.astype(np.int64) - w_zeros.astype(np.int64))
        for threads in (1, 2):
            native_threads(threads)
            np.testing.assert_array_equal(quant.matmul_8bit(a, zero, w, w_zeros), want)


def test_the_8bit_product_checks_its_arguments():
    ffi, lib = native.compiled.ffi, native.compiled.lib
    a, w, y, zeros = np.zeros(6, np.uint8), np.zeros(6, np.uint8), np.zeros(4, np.int32), np.zeros(2, np.int32)

    def call(a_type=1, zero=0, w_type=2, w_zeros=zeros, w_zeros_len=2, m=2, k=3, n=2, y_len=4):
        return lib.rtd_matmul_8bit(ffi.from_buffer("uint8_t[]", a), a_type, a.size, zero, ffi.from_buffer("uint8_t[]", w), w_type,
                                   w.size, ffi.from_buffer("int32_t[]", w_zeros), w_zeros_len,
                                   ffi.from_buffer("int32_t[]", y, require_writable=True), y_len, m, k, n)
    assert call() == 0
    assert call(w_zeros_len=1) == 0   # one zero point for the whole of w
    assert call(a_type=0) != 0        # not an 8-bit type
    assert call(w_type=3) != 0
    assert call(zero=256) != 0        # a zero point outside uint8
    assert call(a_type=2, zero=128) != 0
    assert call(w_zeros=np.array([0, 128], np.int32)) != 0   # a weight's zero point outside int8
    assert call(w_zeros_len=3) != 0   # neither 1 nor n zero points
    assert call(m=3) != 0             # a longer than given
    assert call(n=3) != 0             # w longer than given
    assert call(y_len=5) != 0
    assert call(k=0, m=0, n=0, y_len=0) != 0   # no k
    assert quant.matmul_8bit(np.zeros((2, 40000), np.uint8), 0, np.zeros((40000, 1), np.int8), 0) is None   # past quant.MAX_K
