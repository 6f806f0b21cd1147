"""The compiled depthwise kernel (kernels/native): equal to the NumPy path over odd geometries,
refusing what it does not handle (the caller then runs NumPy), safe against wrong lengths at the
C boundary, equal to onnxruntime through compile_model, and loaded in a real confined worker."""
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from rtd.kernels import compile_model
from rtd.kernels import native
from rtd.kernels.native import depthwise
from rtd.kernels.native.depthwise import Refusal, depthwise_conv2d, refusal
from rtd.kernels.ops._conv import _depthwise, conv
from rtd.kernels.ops._window import geometry

pytestmark = pytest.mark.skipif(native.compiled is None, reason="rtd was installed without its compiled kernels")


def numpy_depthwise(x, w, bias, strides, dilations, begin, end, out_shape, relu):
    """The NumPy path the compiled kernel replaces: tap by tap, then bias, then ReLU."""
    y = _depthwise(np, x, w, list(w.shape[2:]), strides, dilations, begin, end, out_shape)
    if bias is not None:
        y = y + bias.reshape(1, -1, 1, 1)
    return np.maximum(y, 0) if relu else y


@st.composite
def depthwise_cases(draw):
    kh, kw = draw(st.sampled_from([(1, 1), (3, 3), (5, 5), (7, 7), (1, 3), (3, 2)]))
    dh, dw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    pads = [draw(st.integers(0, 3)) for _ in range(4)]
    n, c = draw(st.integers(1, 3)), draw(st.integers(1, 9))
    # at least one window fits the padded input
    h = draw(st.integers(max(1, (kh - 1) * dh + 1 - pads[0] - pads[2]), 23))
    # under 8 channels, widths past 32 output columns reach the row-by-row path, narrower ones the flat one;
    # 8 and 9 channels reach channel_block (and one plane by the row paths)
    w = draw(st.integers(max(1, (kw - 1) * dw + 1 - pads[1] - pads[3]), 70))
    seed = draw(st.integers(0, 2**31 - 1))
    return dict(shape=(n, c, h, w), k=(kh, kw), strides=[sh, sw], dilations=[dh, dw], pads=pads,
                bias=draw(st.booleans()), relu=draw(st.booleans()), seed=seed)


def arrays(case):
    rng = np.random.default_rng(case["seed"])
    n, c, h, w = case["shape"]
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    weights = rng.standard_normal((c, 1) + case["k"], dtype=np.float32)
    bias = rng.standard_normal(c, dtype=np.float32) if case["bias"] else None
    return x, weights, bias


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(depthwise_cases())
def test_compiled_kernel_equals_the_numpy_path(case):
    x, w, bias = arrays(case)
    out_shape, begin, end = geometry(x.shape[2:], case["k"], case["strides"], case["dilations"], case["pads"])
    args = (case["strides"], case["dilations"], begin, end, out_shape)
    assert refusal(x, w, bias, *args) is None
    y = depthwise_conv2d(x, w, bias, *args, relu=case["relu"])
    expected = numpy_depthwise(x, w, bias, *args, case["relu"])
    assert y.shape == expected.shape and y.dtype == np.float32
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


@settings(max_examples=60, deadline=None)
@given(depthwise_cases(), st.sampled_from(["x", "w", "bias"]))
def test_non_contiguous_operands_are_copied_not_misread(case, which):
    x, w, bias = arrays(case)
    bias = bias if bias is not None else np.zeros(x.shape[1], np.float32)
    out_shape, begin, end = geometry(x.shape[2:], case["k"], case["strides"], case["dilations"], case["pads"])
    args = (case["strides"], case["dilations"], begin, end, out_shape)
    expected = numpy_depthwise(x, w, bias, *args, case["relu"])
    strided = {"x": x, "w": w, "bias": bias}
    wide = np.zeros(strided[which].shape[:-1] + (2 * strided[which].shape[-1],), np.float32)
    wide[..., ::2] = strided[which]   # every other element: the same values, not contiguous
    strided[which] = wide[..., ::2]
    assert not strided[which].flags.c_contiguous or strided[which].shape[-1] == 1   # a length-1 axis's stride does not count
    y = depthwise_conv2d(strided["x"], strided["w"], strided["bias"], *args, relu=case["relu"])
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


def test_unaligned_input_is_copied():
    x = np.random.default_rng(1).standard_normal((1, 4, 9, 9), dtype=np.float32)
    raw = np.zeros(x.nbytes + 1, np.uint8)
    unaligned = raw[1:].view(np.float32).reshape(x.shape)
    unaligned[...] = x
    assert not unaligned.flags.aligned
    w = np.ones((4, 1, 3, 3), np.float32)
    args = ([1, 1], [1, 1], [1, 1], [1, 1], [9, 9])
    np.testing.assert_allclose(depthwise_conv2d(unaligned, w, None, *args), numpy_depthwise(x, w, None, *args, False), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("change, reason", [
    (dict(x_dtype=np.float64), Refusal.DTYPE),
    (dict(bias_dtype=np.float16), Refusal.DTYPE),
    (dict(w_shape=(4, 2, 3, 3)), Refusal.SHAPE),            # not one filter per channel
    (dict(w_shape=(3, 1, 3, 3)), Refusal.SHAPE),            # fewer filters than channels
    (dict(bias_shape=(5,)), Refusal.SHAPE),
    (dict(x_shape=(1, 4, 9)), Refusal.SHAPE),               # 1-D conv
    (dict(x_shape=(0, 4, 9, 9)), Refusal.EMPTY),
    (dict(x_shape=(1, 0, 9, 9), w_shape=(0, 1, 3, 3), bias_shape=(0,)), Refusal.EMPTY),
    (dict(out_shape=[0, 9]), Refusal.EMPTY),
    (dict(strides=[1 << 30, 1]), Refusal.BOUNDS),
    (dict(dilations=[1, 0]), Refusal.BOUNDS),
    (dict(begin=[-1, 1]), Refusal.BOUNDS),
    (dict(out_shape=[10, 9]), Refusal.GEOMETRY),            # one row more than the input gives
    (dict(out_shape=[8, 9]), Refusal.GEOMETRY),
    (dict(dilations=[9, 1]), Refusal.GEOMETRY),             # the window outgrows the padded input
])
def test_what_the_wrapper_does_not_handle_is_refused_not_guessed(change, reason):
    spec = dict(x_shape=(1, 4, 9, 9), x_dtype=np.float32, w_shape=(4, 1, 3, 3), bias_shape=(4,), bias_dtype=np.float32,
                strides=[1, 1], dilations=[1, 1], begin=[1, 1], end=[1, 1], out_shape=[9, 9]) | change
    x = np.ones(spec["x_shape"], spec["x_dtype"])
    w = np.ones(spec["w_shape"], np.float32)
    bias = np.ones(spec["bias_shape"], spec["bias_dtype"])
    args = (spec["strides"], spec["dilations"], spec["begin"], spec["end"], spec["out_shape"])
    assert refusal(x, w, bias, *args) is reason
    assert depthwise_conv2d(x, w, bias, *args) is None


@pytest.mark.parametrize("shape", [(0, 3, 8, 8), (2, 3, 0, 8), (2, 3, 8, 0)])
def test_zero_size_dims_run_through_numpy(shape):
    """conv() falls back for what the compiled kernel refuses; the result still follows ONNX."""
    x = np.ones(shape, np.float32)
    w = np.ones((3, 1, 3, 3), np.float32)
    y = conv(np, x, w, np.ones(3, np.float32), 3, None, None, None, [1, 1, 1, 1], "NOTSET")
    out_shape = [max(0, s) for s in shape[2:]]
    assert y.shape == shape[:2] + tuple(out_shape)


def test_the_c_boundary_checks_lengths_itself():
    """A wrapper bug handing wrong lengths gets an error status, not an out-of-bounds read."""
    ffi, lib = native.compiled.ffi, native.compiled.lib
    x, w, y = np.ones(4 * 81, np.float32), np.ones(4 * 9, np.float32), np.empty(4 * 81, np.float32)
    padded = np.zeros((11 + 9) * 11, np.float32)   # (hp + oh) * wp
    buf = ffi.from_buffer

    def call(x_len=x.size, w_len=w.size, y_len=y.size, padded_len=padded.size, h=9, oh=9, sh=1, pad_bottom=1):
        return lib.rtd_depthwise_conv2d_f32(buf("float[]", x), x_len, buf("float[]", w), w_len, ffi.NULL, 0,
                                            buf("float[]", y, require_writable=True), y_len,
                                            buf("float[]", padded, require_writable=True), padded_len,
                                            1, 4, h, 9, 3, 3, oh, 9, sh, 1, 1, 1, 1, 1, pad_bottom, 1, 0)
    assert call() == 0
    assert call(h=10, pad_bottom=0) == lib.RTD_NATIVE_E_LENGTH   # claims a bigger input than it passes
    assert call(y_len=y.size - 1) == lib.RTD_NATIVE_E_LENGTH
    assert call(w_len=w.size + 9) == lib.RTD_NATIVE_E_LENGTH
    assert call(padded_len=padded.size - 1) == lib.RTD_NATIVE_E_LENGTH
    assert call(oh=10) == lib.RTD_NATIVE_E_ARGUMENT              # a last window past the padded input
    assert call(sh=0) == lib.RTD_NATIVE_E_ARGUMENT


def depthwise_model(c, h, w, k, strides, pads, dilations, relu) -> bytes:
    rng = np.random.default_rng(7)
    weights = numpy_helper.from_array(rng.standard_normal((c, 1, k, k), dtype=np.float32), "W")
    bias = numpy_helper.from_array(rng.standard_normal(c, dtype=np.float32), "B")
    nodes = [helper.make_node("Conv", ["X", "W", "B"], ["Y" if not relu else "C"], group=c, kernel_shape=[k, k],
                              strides=strides, pads=pads, dilations=dilations)]
    if relu:
        nodes.append(helper.make_node("Relu", ["C"], ["Y"]))
    graph = helper.make_graph(nodes, "depthwise", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", c, h, w])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], [weights, bias])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("c, h, w, k, strides, pads, dilations, relu", [
    (32, 40, 40, 3, [1, 1], [1, 1, 1, 1], [1, 1], True),     # MobileNet's stride-1 block, Conv+Relu fused
    (16, 33, 31, 3, [2, 2], [1, 1, 1, 1], [1, 1], False),    # a stride-2 block, odd sizes
    (8, 21, 19, 5, [1, 2], [2, 1, 2, 3], [2, 1], True),
    (4, 17, 17, 7, [1, 1], [3, 3, 3, 3], [1, 1], False),
])
def test_compile_model_matches_onnxruntime(c, h, w, k, strides, pads, dilations, relu):
    ort = pytest.importorskip("onnxruntime")
    model = depthwise_model(c, h, w, k, strides, pads, dilations, relu)
    x = np.random.default_rng(3).standard_normal((2, c, h, w), dtype=np.float32)
    ours = compile_model(model).run({"X": x})["Y"]
    theirs = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)


def test_conv_relu_fusion_reaches_the_compiled_kernel(monkeypatch):
    """compile_model's ConvActivation hands ReLU down: the compiled kernel gets relu=True and no
    separate ReLU pass follows (spied on, not replaced: the real kernel still computes)."""
    calls = []
    real = depthwise.depthwise_conv2d

    def spy(*args, **kwargs):
        calls.append(args[-1] if len(args) > 8 else kwargs.get("relu"))
        return real(*args, **kwargs)
    monkeypatch.setattr("rtd.kernels.ops._conv.depthwise_conv2d", spy)
    model = depthwise_model(8, 12, 12, 3, [1, 1], [1, 1, 1, 1], [1, 1], relu=True)
    x = np.random.default_rng(5).standard_normal((1, 8, 12, 12), dtype=np.float32)
    y = compile_model(model).run({"X": x})["Y"]
    assert calls and all(calls) and (y >= 0).all()


def confined_depthwise() -> dict:
    """Inside a confined worker: the kernel the zygote-style fork inherited computes the right answer."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 16, 30, 30), dtype=np.float32)
    w = rng.standard_normal((16, 1, 3, 3), dtype=np.float32)
    bias = rng.standard_normal(16, dtype=np.float32)
    args = ([1, 1], [1, 1], [1, 1], [1, 1], [30, 30])
    y = depthwise_conv2d(x, w, bias, *args, relu=True)
    return {"path": native.path_in_force(), "max_error": float(np.abs(y - numpy_depthwise(x, w, bias, *args, True)).max())}


@pytest.mark.skipif(os.geteuid() != 0, reason="confined workers need root")
def test_the_kernel_runs_in_a_confined_worker():
    from rtd.sandbox import run_confined
    result = run_confined(confined_depthwise)
    assert result["path"] == "compiled" and result["max_error"] < 1e-5


def test_the_worker_module_the_zygote_preloads_loads_the_library():
    """The zygote pre-imports rtd.daemon.worker.main before any fork; that import alone must map the
    library, since a confined worker cannot open it later."""
    code = "import sys, rtd.daemon.worker.main; print('rtd.kernels.native._compiled' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "True", done.stderr


def test_numpy_padding_buffers_do_not_leak_between_interiors():
    """Found by the property test: two inputs with the same padded shape and begin pads but
    different end pads shared one padding buffer, so the second saw the first's values where its
    padding should be zero. The NumPy path now keys the buffer by both pads."""
    w = np.ones((1, 1, 3, 3), np.float32)
    taller = np.full((1, 1, 2, 4), 5.0, np.float32)     # padded to (1, 1, 4, 5) (a spare row, no bottom pad): fills row 2
    _depthwise(np, taller, w, [3, 3], [1, 1], [1, 1], [1, 1], [0, 0], [1, 3])
    x = np.ones((1, 1, 1, 4), np.float32)               # padded to (1, 1, 4, 5) too, where row 2 is padding
    y = _depthwise(np, x, w, [3, 3], [1, 1], [1, 1], [1, 1], [1, 0], [1, 3])
    np.testing.assert_array_equal(y, depthwise_conv2d(x, w, None, [1, 1], [1, 1], [1, 1], [1, 0], [1, 3]))


FALLBACK = """
import sys
import time
sys.modules["rtd.kernels.native._compiled"] = None   # as if rtd was built without a compiler: the import fails
import numpy as np
from rtd.kernels import compile_model, native
from rtd.kernels.native.depthwise import Refusal, refusal
x = np.random.default_rng(0).standard_normal((1, 8, 12, 12), dtype=np.float32)
model = compile_model(bytes.fromhex(sys.argv[1]))
y = model.run({"X": x})["Y"]
model.run({"X": x})
print(native.path_in_force(), refusal(x, np.ones((8, 1, 3, 3), np.float32), None, [1, 1], [1, 1], [1, 1], [1, 1], [12, 12]).name,
      float(y.min()) >= 0)
"""


def test_without_the_library_the_executor_runs_numpy_and_says_so_once():
    model = depthwise_model(8, 12, 12, 3, [1, 1], [1, 1, 1, 1], [1, 1], relu=True)
    done = subprocess.run([sys.executable, "-c", FALLBACK, model.hex()], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["numpy", Refusal.NOT_BUILT.name, "True"], done.stderr
    assert done.stderr.count("compiled CPU kernels unavailable") == 1


UNDER_MDWE = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(65, 1, 0, 0, 0) != 0:   # PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN: what MemoryDenyWriteExecute=yes sets
    print("unsupported", ctypes.get_errno())
    sys.exit(0)
import numpy as np
from rtd.kernels import native
from rtd.kernels.native.depthwise import depthwise_conv2d
x = np.ones((1, 4, 8, 8), np.float32)
y = depthwise_conv2d(x, np.ones((4, 1, 3, 3), np.float32), None, [1, 1], [1, 1], [1, 1], [1, 1], [8, 8])
print(native.path_in_force(), float(y[0, 0, 4, 4]))
"""


def test_the_library_loads_and_runs_under_memory_deny_write_execute():
    """The service's systemd unit sets MemoryDenyWriteExecute=yes: the library is file-backed
    code built at install time, so loading it (and its ifunc clones) needs no writable+executable page."""
    done = subprocess.run([sys.executable, "-c", UNDER_MDWE], capture_output=True, text=True, timeout=120)
    if done.stdout.startswith("unsupported"):
        pytest.skip(f"this kernel has no PR_SET_MDWE (errno {done.stdout.split()[1]})")
    assert done.stdout.split() == ["compiled", "9.0"], done.stderr


def test_threads_share_the_planes_and_change_no_bit(native_threads):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 48, 64, 64), dtype=np.float32)   # enough taps for two threads
    w = rng.standard_normal((48, 1, 3, 3), dtype=np.float32)
    bias = rng.standard_normal(48, dtype=np.float32)
    results = {}
    for threads in (1, 2):
        native_threads(threads)
        results[threads] = depthwise_conv2d(x, w, bias, [1, 1], [1, 1], [1, 1], [1, 1], [64, 64], relu=True)
    np.testing.assert_array_equal(results[1], results[2])
    np.testing.assert_allclose(results[1], numpy_depthwise(x, w, bias, [1, 1], [1, 1], [1, 1], [1, 1], [64, 64], True),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("k", [3, 5])
@pytest.mark.parametrize("size", [(9, 9), (12, 15), (40, 37)])
def test_stride_two_reads_its_phases_and_gives_every_other_stride_one_output(k, size):
    """At stride 2 the plane is split into its even and odd columns, each tap summed in the same order: every
    output is bit for bit the stride-1 convolution's at (2 oy, 2 ox)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3) + size).astype(np.float32)
    w = rng.standard_normal((3, 1, k, k)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    for pad in range(k // 2 + 1):
        one = [n + 2 * pad - k + 1 for n in size]
        two = [(n - 1) // 2 + 1 for n in one]
        dense = depthwise_conv2d(x, w, b, [1, 1], [1, 1], [pad, pad], [pad, pad], one, relu=True)
        strided = depthwise_conv2d(x, w, b, [2, 2], [1, 1], [pad, pad], [pad, pad], two, relu=True)
        np.testing.assert_array_equal(strided, dense[:, :, ::2, ::2])


@pytest.mark.parametrize("k", [3, 5])
@pytest.mark.parametrize("strides", [[1, 1], [2, 2], [2, 1]])
def test_eight_channels_at_a_time_give_the_row_paths_bits(k, strides, native_threads):
    """8 or more channels run 8 at a time (channel_block), the last c % 8 one plane at a time: every channel
    is bit for bit what it is when it runs alone (a one-channel call runs the row path), at 1 and 2 threads
    (the stride-1 calls have the work to share between two)."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((6, 21, 14, 11), dtype=np.float32)   # two blocks of 8 channels and 5 planes an image
    w = rng.standard_normal((21, 1, k, k), dtype=np.float32)
    bias = rng.standard_normal(21, dtype=np.float32)
    pad = [k // 2, k // 2]
    out = [(14 + 2 * pad[0] - k) // strides[0] + 1, (11 + 2 * pad[1] - k) // strides[1] + 1]
    alone = np.concatenate([depthwise_conv2d(x[:, ch:ch + 1].copy(), w[ch:ch + 1].copy(), bias[ch:ch + 1].copy(), strides,
                                             [1, 1], pad, pad, out, relu=True) for ch in range(21)], axis=1)
    for threads in (1, 2):
        native_threads(threads)
        np.testing.assert_array_equal(depthwise_conv2d(x, w, bias, strides, [1, 1], pad, pad, out, relu=True), alone)
