"""Linear and cubic Resize on the CPU (kernels/native/resample.c): a pass per resized axis, the same compiled
code in a traced run and in a native program (the same bits, at one thread and two), within rounding of the
NumPy passes it replaced and onnxruntime's values; the entry point refuses wrong lengths and indices."""
import numpy as np
import onnxruntime as ort
import pytest

import rtd.kernels.ops._resize as resize_module
from rtd.kernels import compile_model, emit
from rtd.kernels.native import compiled
from tests.kernels.kernel_graphs import const, model, node

pytestmark = pytest.mark.skipif(compiled is None, reason="the compiled kernels are not built: no native programs to run")

CASES = [  # (attributes, scales or sizes, input shape)
    (dict(mode="linear"), ("scales", [1, 1, 2, 2]), (1, 3, 6, 5)),                    # an FPN's upsampling (half_pixel)
    (dict(mode="linear", coordinate_transformation_mode="align_corners"), ("sizes", [2, 3, 11, 7]), (2, 3, 6, 5)),
    (dict(mode="linear", coordinate_transformation_mode="asymmetric"), ("scales", [1, 1, 0.5, 3]), (1, 2, 8, 4)),
    (dict(mode="cubic"), ("scales", [1, 1, 1.5, 2]), (1, 2, 6, 9)),
    (dict(mode="linear", antialias=1), ("sizes", [1, 2, 3, 4]), (1, 2, 12, 13)),       # many taps per output
    (dict(mode="linear"), ("scales", [1, 1, 2, 2]), (1, 40, 24, 28)),                  # big enough to share
]


def _resize_model(attrs, parameter, shape):
    kind, values = parameter
    inputs = ["x", "", "scales"] if kind == "scales" else ["x", "", "", "sizes"]
    array = np.array(values, np.float32 if kind == "scales" else np.int64)
    return model([node("Resize", inputs, ["y"], **attrs)], [("x", list(shape))], [("y", None)], [const(kind, array)], opset=18)


@pytest.mark.parametrize("attrs,parameter,shape", CASES)
@pytest.mark.parametrize("threads", [1, 2])
def test_a_resize_resamples_in_the_program_with_the_traced_bits(attrs, parameter, shape, threads, monkeypatch, native_threads):
    onnx_model = _resize_model(attrs, parameter, shape)
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    native_threads(threads)
    ours = compile_model(onnx_model)
    traced, planned = ({k: v.copy() for k, v in ours.run({"x": x}).items()} for _ in range(2))
    (plan,) = ours._plans.values()
    (emitted,) = plan.emitted
    assert emitted is not None and {op.opcode for op in emitted.ops} == {emit.RESAMPLE}
    np.testing.assert_array_equal(traced["y"], planned["y"])
    native_threads(1)
    np.testing.assert_array_equal(compile_model(onnx_model).run({"x": x})["y"], planned["y"])   # one thread's bits
    with monkeypatch.context() as m:   # the NumPy passes: the products rounded apart (no FMA), else the same sums
        m.setattr(resize_module, "resample", lambda *args: None)
        numpy_values = compile_model(onnx_model).run({"x": x})["y"]
    np.testing.assert_allclose(planned["y"], numpy_values, rtol=1e-5, atol=1e-6)
    want = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(planned["y"], want, rtol=1e-5, atol=1e-5)


def _call(x_len=6, y_len=12, index=None, weights=None, outer=1, in_size=3, out_size=6, inner=2, taps=2):
    ffi, lib = compiled.ffi, compiled.lib
    index = np.zeros(out_size * taps, np.int64) if index is None else np.asarray(index, np.int64)
    weights = np.full(index.size, 0.5, np.float32) if weights is None else weights
    x, y = np.ones(max(x_len, 1), np.float32), np.zeros(max(y_len, 1), np.float32)
    status = lib.rtd_resample_f32(ffi.from_buffer("float[]", x), x_len, ffi.from_buffer("float[]", y), y_len,
                                  ffi.from_buffer("int64_t[]", index), index.size, ffi.from_buffer("float[]", weights),
                                  weights.size, outer, in_size, out_size, inner, taps)
    return status, y


def test_the_resample_entry_point_checks_lengths_and_indices():
    status, y = _call()
    assert status == 0 and y.tolist() == [1.0] * 12
    assert _call(x_len=7)[0] != 0                                       # x not outer * in_size * inner
    assert _call(y_len=11)[0] != 0                                      # y not outer * out_size * inner
    assert _call(index=np.zeros(11, np.int64))[0] != 0                  # tables not out_size * taps
    assert _call(weights=np.zeros(11, np.float32))[0] != 0
    assert _call(index=[0, 1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0])[0] != 0   # an index past the input
    assert _call(index=[0, -1] + [0] * 10)[0] != 0                      # a negative one
    assert _call(taps=0, index=np.zeros(0, np.int64))[0] != 0
    status, y = _call(inner=1, x_len=3, y_len=6)                        # along the last axis
    assert status == 0 and y[:6].tolist() == [1.0] * 6
