"""A ConvTranspose whose kernel is its stride (kernels/native/tiles.c): each output row written once by the compiled
kernel, in traced and planned runs alike; against onnxruntime and against the NumPy path it replaced (the GEMM's
columns placed by a strided copy per tap), at one thread and two with the same bits; the entry point refuses wrong
lengths and arguments."""
import numpy as np
import onnxruntime as ort
import pytest

import rtd.kernels.ops.op_conv_transpose as conv_transpose_module
from rtd.kernels import compile_model
from rtd.kernels.native import compiled
from tests.kernels.kernel_graphs import const, model, node

pytestmark = pytest.mark.skipif(compiled is None, reason="the compiled kernels are not built")

CASES = [  # (x shape, output channels, kernel = stride, bias)
    ((1, 16, 23, 29), 16, (2, 2), True),     # a DBNet head's 2x2 upsampling; rows not a multiple of 8
    ((2, 3, 5, 16), 1, (2, 2), False),       # two images, one output channel, no bias
    ((1, 8, 9, 17), 5, (3, 3), True),        # 3x3 tiles: the general tap columns
    ((1, 4, 6, 11), 3, (2, 4), True),        # rectangular tiles
    ((1, 2, 4, 9), 2, (1, 1), True),         # a pointwise one
    ((1, 3, 3, 10), 2, (2, 9), True),        # wider than the vector path: a pixel at a time
    ((1, 32, 40, 48), 8, (2, 2), True),      # big enough to share among the threads
]


def _model(shape, out_channels, kernel, bias, rng):
    w = rng.standard_normal((shape[1], out_channels, *kernel)).astype(np.float32)
    inputs, initializers = ["x", "w"], [const("w", w)]
    if bias:
        inputs.append("b")
        initializers.append(const("b", rng.standard_normal(out_channels).astype(np.float32)))
    return model([node("ConvTranspose", inputs, ["y"], kernel_shape=list(kernel), strides=list(kernel))],
                 [("x", list(shape))], [("y", None)], initializers, opset=14)


@pytest.mark.parametrize("shape,out_channels,kernel,bias", CASES)
def test_tiles_match_onnxruntime_and_the_numpy_path_with_the_same_bits_at_two_threads(shape, out_channels, kernel, bias,
                                                                                        monkeypatch, native_threads):
    rng = np.random.default_rng(5)
    onnx_model = _model(shape, out_channels, kernel, bias, rng)
    x = rng.standard_normal(shape).astype(np.float32)
    taken = []
    real = conv_transpose_module.conv_transpose_tiles
    monkeypatch.setattr(conv_transpose_module, "conv_transpose_tiles", lambda *a: taken.append(1) or real(*a))
    ours = compile_model(onnx_model)
    traced, planned = (ours.run({"x": x})["y"].copy() for _ in range(2))
    assert taken, "the compiled kernel was not called"
    np.testing.assert_array_equal(traced, planned)
    native_threads(2)
    np.testing.assert_array_equal(compile_model(onnx_model).run({"x": x})["y"], planned)
    native_threads(1)
    monkeypatch.setattr(conv_transpose_module, "conv_transpose_tiles", lambda *a: None)   # the NumPy path
    np.testing.assert_allclose(planned, compile_model(onnx_model).run({"x": x})["y"], rtol=1e-5, atol=1e-5)
    want = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(planned, want, rtol=1e-5, atol=1e-5)


def _call(x_len=2 * 3 * 4, w_len=2 * 3 * 4, bias_len=3, y_len=3 * 3 * 4 * 4, n=1, c=2, h=3, w=4, o=3, kh=2, kw=2):
    ffi, lib = compiled.ffi, compiled.lib
    x, weight = np.ones(max(x_len, 1), np.float32), np.ones(max(w_len, 1), np.float32)
    bias, y = np.full(max(bias_len, 1), 0.5, np.float32), np.zeros(max(y_len, 1), np.float32)
    status = lib.rtd_conv_transpose_tiles_f32(ffi.from_buffer("float[]", x), x_len, ffi.from_buffer("float[]", weight), w_len,
                                              ffi.from_buffer("float[]", bias) if bias_len else ffi.NULL, bias_len,
                                              ffi.from_buffer("float[]", y), y_len, n, c, h, w, o, kh, kw)
    return status, y


def test_the_tiles_entry_point_checks_its_lengths_and_arguments():
    status, y = _call()
    assert status == 0 and y.tolist() == [2.5] * (3 * 3 * 4 * 4)     # 0.5 + two channels of 1 x 1
    assert _call(x_len=23)[0] != 0                                     # x not n * c * h * w
    assert _call(w_len=23)[0] != 0                                     # weight not c * o * kh * kw
    assert _call(bias_len=2)[0] != 0                                   # bias not o
    assert _call(y_len=143)[0] != 0                                    # y not n * o * h * kh * w * kw
    assert _call(c=0, x_len=0, w_len=0)[0] != 0
    assert _call(kh=0, w_len=0, y_len=0)[0] != 0
    assert _call(kh=65, w_len=2 * 3 * 65 * 2, y_len=3 * 3 * 65 * 4 * 2)[0] != 0   # a tile past the kernel's bound
    assert _call(n=1 << 62)[0] != 0                                    # sizes that overflow
    status, y = _call(bias_len=0)
    assert status == 0 and y.tolist() == [2.0] * (3 * 3 * 4 * 4)
