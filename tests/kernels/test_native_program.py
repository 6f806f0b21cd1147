"""Whole-plan native execution (kernels/emit.py, kernels/native/program.{py,c}): a plan's runs of compiled
steps as one C program. The program gives the per-step Python path's bits exactly (same kernels, exact
copies), at one thread and two; values that leave the plan are not arena bytes a later run overwrites; the
interpreter refuses operands outside their slots and writes into read-only slots with a status."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import rtd.kernels.plan as plan_module
from rtd.kernels import compile_model, emit
from rtd.kernels.native import compiled
from tests.kernels.kernel_graphs import const, model, node, typed_model

pytestmark = pytest.mark.skipif(compiled is None, reason="the compiled kernels are not built: no native programs to run")


def mixed_graph():
    """Conv+ReLU, pooling, reshapes, transposes, slices, pads, concat, a constant-weight MatMul with bias,
    softmax, reductions, a constant-index Gather, a cast and an LSTM: the ops emit.py compiles."""
    rng = np.random.default_rng(0)
    f32 = np.float32
    nodes = [node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), node("Relu", ["c"], ["r"]),
             node("Conv", ["r", "dw"], ["d"], group=4, pads=[1, 1, 1, 1]),
             node("MaxPool", ["d"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             node("AveragePool", ["r"], ["ap"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             node("Concat", ["p", "ap"], ["cat"], axis=1),
             node("Pad", ["cat", "pads"], ["padded"]),
             node("Slice", ["padded", "starts", "ends", "axes"], ["sl"]),
             node("Transpose", ["sl"], ["t"], perm=[0, 2, 3, 1]),
             node("Reshape", ["t", "shape"], ["flat"]),
             node("MatMul", ["flat", "fc"], ["m"]), node("Add", ["m", "fcb"], ["mb"]),
             node("Softmax", ["mb"], ["sm"], axis=-1),
             node("ReduceMean", ["sm"], ["mean"], axes=[1], keepdims=1),
             node("Gather", ["sm", "idx"], ["g"], axis=1),
             node("Cast", ["g"], ["g64"], to=11), node("Cast", ["g64"], ["gout"], to=1),
             node("Reshape", ["mb", "seq_shape"], ["seq"]),
             node("LSTM", ["seq", "lw", "lr", "lb"], ["y", "yh", "yc"], hidden_size=5)]
    inits = [const("w", rng.standard_normal((4, 3, 3, 3)).astype(f32)), const("b", rng.standard_normal(4).astype(f32)),
             const("dw", rng.standard_normal((4, 1, 3, 3)).astype(f32)),
             const("pads", np.array([0, 0, 1, 0, 0, 0, 0, 1], np.int64)),
             const("starts", np.array([1], np.int64)), const("ends", np.array([5], np.int64)), const("axes", np.array([2], np.int64)),
             const("shape", np.array([2, -1], np.int64)), const("fc", rng.standard_normal((4 * 5 * 8, 6)).astype(f32)),
             const("fcb", rng.standard_normal(6).astype(f32)), const("idx", np.array([5, 0, 2], np.int64)),
             const("seq_shape", np.array([2, 1, 6], np.int64)),
             const("lw", rng.standard_normal((1, 20, 6)).astype(f32)), const("lr", rng.standard_normal((1, 20, 5)).astype(f32)),
             const("lb", rng.standard_normal((1, 40)).astype(f32))]
    outputs = [(n, None) for n in ("sm", "mean", "gout", "y", "yh", "yc", "flat")]
    return model(nodes, [("x", [2, 3, 8, 8])], outputs, inits)


def run_both(onnx_model, feeds, monkeypatch):
    """Both models' planned runs (a signature's first run is the tracing interpreter's; its second the plan's)."""
    native_model = compile_model(onnx_model)
    native_out = [native_model.run(feeds) for _ in range(2)][-1]
    with monkeypatch.context() as m:
        m.setattr(plan_module, "emit", lambda *args: None)   # every step a Python call, as before native programs
        python_model = compile_model(onnx_model)
        python_out = [python_model.run(feeds) for _ in range(2)][-1]
    return native_model, native_out, python_out


@pytest.mark.parametrize("threads", [1, 2])
def test_native_program_gives_the_per_step_paths_and_onnxruntimes_values(threads, monkeypatch, native_threads):
    onnx_model = mixed_graph()
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)}
    native_threads(threads)
    compiled_model, ours, python = run_both(onnx_model, feeds, monkeypatch)
    (plan,) = compiled_model._plans.values()
    stats = plan.stats()
    assert stats["steps"] == 1 and stats["native_nodes"] == sum(stats["ops"].values()), stats   # one program, every node in it
    reference = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for name, expected in zip(("sm", "mean", "gout", "y", "yh", "yc", "flat"), reference):
        np.testing.assert_allclose(ours[name], python[name], rtol=1e-5, atol=1e-7, err_msg=name)
        np.testing.assert_allclose(ours[name], expected, rtol=1e-4, atol=1e-5, err_msg=name)


def test_outputs_of_a_native_program_survive_the_next_run():
    compiled_model = compile_model(mixed_graph())
    rng = np.random.default_rng(2)
    first_feeds, second_feeds = ({"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)} for _ in range(2))
    first = compiled_model.run(first_feeds)
    kept = {k: np.array(v, copy=True) for k, v in first.items()}
    compiled_model.run(second_feeds)
    for name, value in kept.items():
        np.testing.assert_array_equal(first[name], value, err_msg=name)


def program_status(code, slot_bytes, writable):
    ffi, lib = compiled.ffi, compiled.lib
    buffers = [np.zeros(n, np.uint8) for n in slot_bytes]
    slots = ffi.new("void *[]", [ffi.from_buffer("char[]", b) for b in buffers])
    failed = ffi.new("int64_t *")
    words = np.array(code, np.int64)
    status = lib.rtd_program_run(ffi.from_buffer("int64_t[]", words), len(words), slots, ffi.new("int64_t[]", slot_bytes),
                                 ffi.new("uint8_t[]", writable), len(slot_bytes), failed)
    return status, failed[0], buffers


COPY, FILL = 8, 9


def copy_op(src_slot, src_bytes, dst_slot, dst_bytes, count):
    return [COPY, 2, 7, src_slot, 0, src_bytes, 0, dst_slot, 0, dst_bytes, 1, 4, 1, count, 1, 1, 0, 0]


def test_interpreter_runs_a_good_program_and_refuses_bad_operands():
    fill = [FILL, 1, 3, 0, 0, 16, 1, 4, 4, int(np.array([1.5], np.float32).view(np.int32)[0])]
    status, _, buffers = program_status(fill + copy_op(0, 16, 1, 16, 4), [16, 16], [1, 1])
    assert status == 0 and buffers[1].view(np.float32).tolist() == [1.5] * 4
    # the second op's operand reaches past its slot: refused, nothing of it done
    status, failed, buffers = program_status(fill + copy_op(0, 32, 1, 16, 4), [16, 16], [1, 1])
    assert status != 0 and failed == 1 and not buffers[1].any()
    # a write into a read-only slot
    status, failed, _ = program_status(copy_op(0, 16, 1, 16, 4), [16, 16], [1, 0])
    assert status != 0 and failed == 0
    # a copy walking past the operand it names, though the operand fits its slot
    status, _, _ = program_status(copy_op(0, 16, 1, 16, 8), [64, 64], [1, 1])
    assert status != 0
    # an unknown opcode, a truncated program
    assert program_status([99, 0, 0], [16], [1])[0] != 0
    assert program_status(fill[:-1], [16], [1])[0] != 0


@pytest.mark.parametrize("dtype, value", [(np.uint8, 7), (np.int16, -2), (np.int16, 0x0101), (np.float32, 1.5),
                                          (np.float32, 0.0), (np.int32, -1), (np.int64, 0x0102030405060708),
                                          (np.float64, -0.25)])
def test_fill_writes_each_element_of_every_size(dtype, value):
    """FILL's element of 1, 2, 4 or 8 bytes: one memset when its bytes are alike (0, -1), a store each else."""
    dtype = np.dtype(dtype)
    bits = int(np.array([value], dtype).view(f"i{dtype.itemsize}")[0])   # the low `size` bytes of the parameter
    for count in (1, 7, 1001):
        status, _, (buffer,) = program_status([FILL, 1, 3, 0, 0, count * dtype.itemsize, 1, dtype.itemsize, count, bits],
                                              [count * dtype.itemsize], [1])
        assert status == 0
        np.testing.assert_array_equal(buffer.view(dtype), np.full(count, value, dtype))


def test_reductions_and_casts_give_numpys_bits(monkeypatch):
    """Sums along contiguous elements (the compiled pairwise order), along outer axes, maxima, pooled means, and
    conversions between float, integer and bool, each against the per-step path."""
    nodes = [node("ReduceSum", ["x", "last"], ["sum_last"], keepdims=0), node("ReduceMean", ["x", "middle"], ["mean_middle"]),
             node("ReduceMax", ["x", "last"], ["max_last"]), node("GlobalAveragePool", ["x4"], ["pooled"]),
             node("Mul", ["x", "hundred"], ["scaled"]), node("Cast", ["scaled"], ["as_int"], to=7),
             node("Cast", ["as_int"], ["back"], to=1), node("Cast", ["as_int"], ["as_bool"], to=9),
             node("Cast", ["as_bool"], ["bool_float"], to=1), node("Cast", ["scaled"], ["as_int32"], to=6),
             node("Cast", ["as_int32"], ["int32_double"], to=11)]
    inits = [const("last", np.array([-1], np.int64)), const("middle", np.array([1], np.int64)), const("hundred", np.float32(100))]
    outputs = ["sum_last", "mean_middle", "max_last", "pooled", "back", "bool_float", "int32_double"]
    onnx_model = model(nodes, [("x", [3, 5, 1000]), ("x4", [2, 8, 7, 7])], [(n, None) for n in outputs], inits, opset=18)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 5, 1000)).astype(np.float32)
    x.reshape(-1)[:4] = [np.nan, np.inf, -np.inf, 0.001]
    feeds = {"x": x, "x4": rng.standard_normal((2, 8, 7, 7)).astype(np.float32)}
    compiled_model, ours, python = run_both(onnx_model, feeds, monkeypatch)
    (plan,) = compiled_model._plans.values()
    assert plan.stats()["native_nodes"] == len(nodes)
    for name in outputs:
        np.testing.assert_array_equal(ours[name], python[name], err_msg=name)
        assert ours[name].dtype == python[name].dtype


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("direction", ["bidirectional", "reverse"])
def test_an_lstm_of_any_direction_runs_in_the_program_with_the_traced_runs_bits(direction, threads, monkeypatch, native_threads):
    """A bidirectional LSTM (both directions in one LSTM op) and a reverse one, with initial states: the
    program's outputs are the per-step path's bits, and onnxruntime's values."""
    dirs, hidden, size, seq, batch = (2 if direction == "bidirectional" else 1), 19, 7, 5, 3
    rng = np.random.default_rng(5)
    f32 = np.float32
    nodes = [node("LSTM", ["x", "w", "r", "b", "", "h0", "c0"], ["y", "yh", "yc"], hidden_size=hidden, direction=direction)]
    inits = [const("w", rng.standard_normal((dirs, 4 * hidden, size)).astype(f32)),
             const("r", (rng.standard_normal((dirs, 4 * hidden, hidden)) * 0.3).astype(f32)),
             const("b", rng.standard_normal((dirs, 8 * hidden)).astype(f32))]
    onnx_model = model(nodes, [("x", [seq, batch, size]), ("h0", [dirs, batch, hidden]), ("c0", [dirs, batch, hidden])],
                       [(n, None) for n in ("y", "yh", "yc")], inits)
    feeds = {"x": rng.standard_normal((seq, batch, size)).astype(f32), "h0": rng.standard_normal((dirs, batch, hidden)).astype(f32),
             "c0": rng.standard_normal((dirs, batch, hidden)).astype(f32)}
    native_threads(threads)
    compiled_model, ours, python = run_both(onnx_model, feeds, monkeypatch)
    (plan,) = compiled_model._plans.values()
    assert plan.stats()["native_nodes"] == 1
    reference = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for name, expected in zip(("y", "yh", "yc"), reference):
        np.testing.assert_array_equal(ours[name], python[name], err_msg=name)
        np.testing.assert_allclose(ours[name], expected, rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_a_quantized_plan_runs_in_one_program_with_the_traced_runs_bits(dtype, monkeypatch):
    """QuantizeLinear, QLinearConv (per-tensor and per-channel weights, an int32 bias), MaxPool over 8 bits and
    DequantizeLinear: every step a program op, the outputs the per-step path's bits (NaN and infinities
    quantized as NumPy casts them) and onnxruntime's values."""
    rng = np.random.default_rng(6)
    zero = np.array(3 if dtype == np.uint8 else -2, dtype)
    nodes = [node("QuantizeLinear", ["x", "xs", "xz"], ["q"]),
             node("QLinearConv", ["q", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["c"], pads=[1, 1, 1, 1]),
             node("MaxPool", ["c"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             node("QLinearConv", ["p", "ys", "yz", "w2", "ws2", "wz2", "ys", "yz"], ["c2"], kernel_shape=[1, 1]),
             node("DequantizeLinear", ["c2", "ys", "yz"], ["y"]), node("DequantizeLinear", ["q", "xs", "xz"], ["xq"])]
    inits = [const("xs", np.array(0.05, np.float32)), const("xz", zero), const("ys", np.array(0.08, np.float32)),
             const("yz", zero), const("w", rng.integers(-20, 20, (6, 3, 3, 3)).astype(np.int8)),
             const("ws", np.array(0.01, np.float32)), const("wz", np.array(0, np.int8)),
             const("b", rng.integers(-500, 500, 6).astype(np.int32)),
             const("w2", rng.integers(-20, 20, (5, 6, 1, 1)).astype(np.int8)),
             const("ws2", rng.uniform(0.005, 0.02, 5).astype(np.float32)), const("wz2", np.zeros(5, np.int8))]
    onnx_model = model(nodes, [("x", [2, 3, 9, 9])], [("y", None), ("xq", None)], inits, opset=13)
    x = rng.standard_normal((2, 3, 9, 9)).astype(np.float32) * 4
    x.reshape(-1)[:3] = [2.5 * 0.05, 3.5 * 0.05, -2.5 * 0.05]   # halves: rounded to even
    feeds = {"x": x}
    compiled_model, ours, python = run_both(onnx_model, feeds, monkeypatch)
    (plan,) = compiled_model._plans.values()
    assert plan.stats()["native_nodes"] == len(nodes) and plan.stats()["steps"] == 1
    x[0, 0, 0, 3:6] = [np.nan, np.inf, -np.inf]   # only against the per-step path: onnxruntime converts them its own way
    ours_odd, python_odd = (m.run(feeds) for m in (compiled_model, compile_model(onnx_model)))
    np.testing.assert_array_equal(ours_odd["xq"], python_odd["xq"])
    np.testing.assert_array_equal(ours_odd["y"], python_odd["y"])
    x[0, 0, 0, 3:6] = 0
    ours, python = (m.run(feeds) for m in (compiled_model, compile_model(onnx_model)))
    reference = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for name, expected in zip(("y", "xq"), reference):
        np.testing.assert_array_equal(ours[name], python[name], err_msg=name)
        np.testing.assert_allclose(ours[name], expected, atol=0.08 + 1e-6, err_msg=name)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_com_microsofts_8bit_ops_run_in_the_program_with_the_traced_runs_bits(dtype, monkeypatch):
    """QLinearSigmoid and QLinearLeakyRelu (256-entry tables), QLinearAdd (a per-channel operand broadcast) and
    QLinearMul (the 65,536-pair tables), QLinearConcat (one input requantized, one copied) and
    QLinearGlobalAveragePool: program ops whose outputs are the per-step path's bits, so the steps after them
    (a Flatten, a DequantizeLinear) join the program too."""
    from onnx import helper
    rng = np.random.default_rng(7)
    zero = np.array(128 if dtype == np.uint8 else 0, dtype)
    ms = dict(domain="com.microsoft")
    nodes = [node("QuantizeLinear", ["x", "s", "z"], ["q"]), node("QuantizeLinear", ["bias", "s", "z"], ["qb"]),
             node("QLinearSigmoid", ["q", "s", "z", "s2", "z"], ["sg"], **ms),
             node("QLinearLeakyRelu", ["q", "s", "z", "s", "z"], ["lr"], alpha=0.1, **ms),
             node("QLinearAdd", ["lr", "s", "z", "qb", "s", "z", "s2", "z"], ["ad"], **ms),
             node("QLinearMul", ["ad", "s2", "z", "sg", "s2", "z", "s", "z"], ["mu"], **ms),
             node("QLinearGlobalAveragePool", ["mu", "s", "z", "s2", "z"], ["gp"], **ms),
             node("Flatten", ["gp"], ["fl"]), node("DequantizeLinear", ["fl", "s2", "z"], ["y"]),
             node("QLinearConcat", ["s", "z", "mu", "s", "z", "sg", "s2", "z"], ["cc"], axis=-1, **ms)]
    inits = [const("s", np.array(0.04, np.float32)), const("s2", np.array(0.03, np.float32)), const("z", zero),
             const("bias", rng.standard_normal((1, 4, 1, 1)).astype(np.float32))]
    onnx_model = model(nodes, [("x", [2, 4, 5, 6])], [("y", None), ("mu", None), ("cc", None)], inits, opset=13)
    onnx_model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    for output in onnx_model.graph.output[1:]:
        output.type.tensor_type.elem_type = 2 if dtype == np.uint8 else 3
    feeds = {"x": rng.standard_normal((2, 4, 5, 6)).astype(np.float32) * 2}
    compiled_model, ours, python = run_both(onnx_model, feeds, monkeypatch)
    (plan,) = compiled_model._plans.values()
    stats = plan.stats()
    assert stats["native_nodes"] == sum(stats["ops"].values()) and stats["steps"] == 1, stats   # the bias's Q folded
    reference = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for name, expected in zip(("y", "mu", "cc"), reference):
        np.testing.assert_array_equal(ours[name], python[name], err_msg=name)
        np.testing.assert_allclose(ours[name].astype(np.float32), expected.astype(np.float32), atol=0.031 if name == "y" else 1.01,
                                   err_msg=name)


def test_the_8bit_entry_points_check_their_lengths():
    ffi, lib = compiled.ffi, compiled.lib
    x, y8, y = np.zeros(12, np.float32), np.zeros(12, np.uint8), np.zeros(12, np.float32)
    table, pairs = np.zeros(256, np.uint8), np.zeros(65536, np.uint8)
    buf = lambda a: ffi.from_buffer("char[]", a, require_writable=True)   # noqa: E731
    assert lib.rtd_quantize_f32(ffi.cast("float *", buf(x)), 12, 0.5, 3, buf(y8), 1, 12) == 0
    assert lib.rtd_quantize_f32(ffi.cast("float *", buf(x)), 12, 0.5, 3, buf(y8), 1, 11) != 0
    assert lib.rtd_quantize_f32(ffi.cast("float *", buf(x)), 12, 0.5, 300, buf(y8), 1, 12) != 0   # not a uint8 zero point
    assert lib.rtd_dequantize_f32(buf(y8), 2, 12, 0.5, 0, ffi.cast("float *", buf(y)), 13) != 0
    assert lib.rtd_lookup_8bit(ffi.cast("uint8_t *", buf(y8)), 12, ffi.cast("uint8_t *", buf(table)), 255,
                               ffi.cast("uint8_t *", buf(y8)), 12) != 0
    shape, strides = ffi.new("int64_t[]", [3, 4]), ffi.new("int64_t[]", [4, 1])
    u8 = lambda a: ffi.cast("uint8_t *", buf(a))   # noqa: E731
    assert lib.rtd_pairs_8bit(u8(y8), 12, u8(y8), 12, u8(pairs), 65536, u8(y8), 12, 2, shape, strides, strides) == 0
    assert lib.rtd_pairs_8bit(u8(y8), 11, u8(y8), 12, u8(pairs), 65536, u8(y8), 12, 2, shape, strides, strides) != 0
    assert lib.rtd_pairs_8bit(u8(y8), 12, u8(y8), 12, u8(pairs), 65536, u8(y8), 13, 2, shape, strides, strides) != 0
    assert lib.rtd_global_average_8bit(buf(y8), 1, 12, 3, 4, 0, 1.0, 0, buf(y8), 3) == 0
    assert lib.rtd_global_average_8bit(buf(y8), 1, 12, 3, 5, 0, 1.0, 0, buf(y8), 3) != 0
    assert lib.rtd_max_pool2d_8bit(buf(y8), 1, 12, buf(y8), 3, 1, 1, 3, 4, 2, 2, 1, 2, 2, 2, 1, 1, 0, 0) != 0   # y is 2 long
    f32 = lambda a: ffi.cast("float *", buf(a))   # noqa: E731
    bias = np.zeros(3, np.int32)
    i32 = ffi.cast("int32_t *", buf(bias))
    assert lib.rtd_requantize_f32(f32(y), 12, f32(x), 3, i32, 3, buf(y8), 1, 12, 3, 4, 0) == 0
    assert lib.rtd_requantize_f32(f32(y), 12, f32(x), 2, i32, 3, buf(y8), 1, 12, 3, 4, 0) != 0   # 2 multipliers for 3 channels
    assert lib.rtd_requantize_f32(f32(y), 12, f32(x), 3, i32, 3, buf(y8), 1, 12, 5, 4, 0) != 0   # not whole channels
    pooled = np.zeros(6, np.uint8)   # (1, 1, 3, 4) by 2x2 windows, stride 1: (1, 1, 2, 3)
    geometry = (1, 1, 3, 4, 2, 2, 2, 3, 1, 1, 0, 0, 0, 1.0, 0, 1.0, 0)
    assert lib.rtd_average_pool_8bit(buf(y8), 1, 12, f32(y), 12, buf(pooled), 6, *geometry) == 0
    assert lib.rtd_average_pool_8bit(buf(y8), 1, 12, f32(y), 11, buf(pooled), 6, *geometry) != 0   # scratch too short
    assert lib.rtd_average_pool_8bit(buf(y8), 1, 12, f32(y), 12, buf(pooled), 7, *geometry) != 0


def test_a_square_by_pow_runs_in_the_program_with_the_traced_runs_bits():
    """Pow(x, 2) (a spectrum's magnitude: re^2 + im^2, then Sqrt) is lowered to Mul(x, x), which the compiled
    chain runs: the planned run gives the traced run's (NumPy's power) bits; Pow(x, 3) stays NumPy's."""
    nodes = [node("Pow", ["re", "two"], ["re2"]), node("Pow", ["im", "two"], ["im2"]), node("Add", ["re2", "im2"], ["s"]),
             node("Sqrt", ["s"], ["mag"]), node("Pow", ["re", "three"], ["cube"])]
    inits = [const("two", np.array(2.0, np.float32)), const("three", np.array(3.0, np.float32))]
    onnx_model = model(nodes, [("re", [4, 129]), ("im", [4, 129])], [("mag", None), ("cube", None)], inits)
    rng = np.random.default_rng(8)
    feeds = {"re": rng.standard_normal((4, 129)).astype(np.float32) * 100, "im": rng.standard_normal((4, 129)).astype(np.float32)}
    compiled_model = compile_model(onnx_model)
    traced, planned = compiled_model.run(feeds), compiled_model.run(feeds)
    (plan,) = compiled_model._plans.values()
    producer = {n.outputs[0]: e for n, e in zip(plan.graph.nodes, plan.emitted)}
    assert producer["mag"] is not None and producer["cube"] is None   # the square's chain compiled, the cube NumPy's
    for name in ("mag", "cube"):
        np.testing.assert_array_equal(planned[name], traced[name], err_msg=name)
    np.testing.assert_allclose(planned["mag"], np.hypot(feeds["re"], feeds["im"]), rtol=1e-6)


def test_a_programs_run_does_no_numpy_shape_arithmetic(monkeypatch):
    """A streaming model's program runs in a few microseconds, so its exports' sizes are worked out when the
    program is made: a run calls no np.prod (one per export cost as much as the program itself)."""
    compiled_model = compile_model(mixed_graph())
    feeds = {"x": np.random.default_rng(9).standard_normal((2, 3, 8, 8)).astype(np.float32)}
    want = [compiled_model.run(feeds) for _ in range(2)][-1]
    monkeypatch.setattr(np, "prod", lambda *a, **k: pytest.fail("np.prod in a planned run"))
    got = compiled_model.run(feeds)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_a_depthwise_qlinearconv_and_a_qlinearmatmul_run_in_the_program_with_the_traced_runs_bits(dtype, monkeypatch):
    """A depthwise QLinearConv (per-channel scales, an int32 bias: exact float sums of x - x_zp, then requantized per
    channel) and a QLinearMatMul by a constant (our GEMM over exact integer sums, then requantized): program ops
    giving the per-step path's bits and onnxruntime's values."""
    rng = np.random.default_rng(10)
    zero = np.array(7 if dtype == np.uint8 else -3, dtype)
    nodes = [node("QuantizeLinear", ["x", "xs", "xz"], ["q"]),
             node("QLinearConv", ["q", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["d"], group=4, pads=[1, 1, 1, 1],
                  strides=[2, 2]),
             node("Flatten", ["d"], ["f"]),
             node("QLinearMatMul", ["f", "ys", "yz", "m", "ms", "mz", "xs", "xz"], ["mm"]),
             node("DequantizeLinear", ["mm", "xs", "xz"], ["y"])]
    inits = [const("xs", np.array(0.05, np.float32)), const("xz", zero), const("ys", np.array(0.07, np.float32)),
             const("yz", zero), const("w", rng.integers(-30, 30, (4, 1, 3, 3)).astype(np.int8)),
             const("ws", rng.uniform(0.01, 0.03, 4).astype(np.float32)), const("wz", np.zeros(4, np.int8)),
             const("b", rng.integers(-300, 300, 4).astype(np.int32)),
             const("m", rng.integers(-40, 40, (4 * 4 * 4, 6)).astype(np.int8)), const("ms", np.array(0.004, np.float32)),
             const("mz", np.array(0, np.int8))]
    onnx_model = model(nodes, [("x", [3, 4, 8, 8])], [("y", None)], inits, opset=13)
    feeds = {"x": rng.standard_normal((3, 4, 8, 8)).astype(np.float32) * 3}
    compiled_model, ours, python = run_both(onnx_model, feeds, monkeypatch)
    (plan,) = compiled_model._plans.values()
    stats = plan.stats()
    assert stats["native_nodes"] == sum(stats["ops"].values()) and stats["steps"] == 1, stats
    reference = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_array_equal(ours["y"], python["y"])
    np.testing.assert_allclose(ours["y"], reference[0], atol=0.05 + 1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.int8])
@pytest.mark.parametrize("geometry", [((2, 2), (2, 2), (1, 1), (0, 0, 0, 0)), ((3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
                                      ((3, 2), (2, 3), (2, 1), (2, 1, 0, 2)), ((5, 5), (1, 2), (1, 2), (0, 4, 1, 4)),
                                      ((2, 3), (3, 1), (1, 3), (1, 0, 1, 0))])
def test_max_pooling_rows_give_the_numpy_kernels_values(geometry, dtype):
    """pool.c's rows (the columns inside the width tap by tap, the border ones window by window), float32 with a
    NaN and infinities, and 8-bit, against the MaxPool kernel's NumPy path over borders, strides and dilations."""
    from rtd.kernels.ops._pool import max_pool
    kernel, strides, dilations, pads = geometry
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((2, 3, 9, 11)) * 60).astype(dtype) if dtype == np.float32 else \
        rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1, (2, 3, 9, 11)).astype(dtype)
    if dtype == np.float32:
        x[0, 0, 4, 5], x[1, 2, 0, 0], x[1, 1, 3, 3] = np.nan, np.inf, -np.inf
    want, _ = max_pool(np, x, list(kernel), list(strides), list(dilations), list(pads), "NOTSET", 0, 0, False)
    got = np.empty_like(want)
    ffi, lib = compiled.ffi, compiled.lib
    numbers = (*x.shape, *kernel, *want.shape[2:], *strides, *dilations, pads[0], pads[1])
    if dtype == np.float32:
        status = lib.rtd_max_pool2d_f32(ffi.from_buffer("float[]", x), x.size, ffi.from_buffer("float[]", got, require_writable=True),
                                        got.size, *numbers)
    else:
        status = lib.rtd_max_pool2d_8bit(ffi.from_buffer(x), 1 if dtype == np.uint8 else 2, x.size,
                                         ffi.from_buffer(got, require_writable=True), got.size, *numbers)
    assert status == 0
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("geometry", [((2, 2), (2, 2), (1, 1), (0, 0, 0, 0)), ((3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
                                      ((2, 2), (1, 1), (1, 1), (0, 0, 0, 0)), ((3, 2), (2, 2), (1, 2), (0, 1, 0, 1))])
@pytest.mark.parametrize("width", [12, 17, 33, 47, 64, 70])
def test_wide_8bit_rows_pool_sixteen_columns_at_a_time_with_the_numpy_kernels_values(geometry, dtype, width):
    """Rows wide enough for pool.c's 16-column blocks of 8-bit values at strides 1 and 2, and narrower ones (one block
    from the first interior column, its lanes past the row dropped; the tensor's last rows read from copies): the
    MaxPool kernel's NumPy values, both signs of int8 and uint8's top half included."""
    from rtd.kernels.ops._pool import max_pool
    kernel, strides, dilations, pads = geometry
    height = 8 if width < 40 else 9   # windows ending at the tensor's last row
    x = np.random.default_rng(13).integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1, (2, 3, height, width)).astype(dtype)
    want, _ = max_pool(np, x, list(kernel), list(strides), list(dilations), list(pads), "NOTSET", 0, 0, False)
    got = np.empty_like(want)
    ffi, lib = compiled.ffi, compiled.lib
    numbers = (*x.shape, *kernel, *want.shape[2:], *strides, *dilations, pads[0], pads[1])
    status = lib.rtd_max_pool2d_8bit(ffi.from_buffer(x), 1 if dtype == np.uint8 else 2, x.size,
                                     ffi.from_buffer(got, require_writable=True), got.size, *numbers)
    assert status == 0
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("attrs", [dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                                   dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1),
                                   dict(kernel_shape=[2, 3], strides=[2, 2], ceil_mode=1),
                                   dict(kernel_shape=[2, 3], strides=[2, 2], ceil_mode=1, count_include_pad=1, pads=[0, 2, 1, 0]),
                                   dict(kernel_shape=[7, 9])])
def test_qlinear_average_pool_runs_in_the_program_with_the_per_step_paths_bits(attrs, dtype, monkeypatch):
    """com.microsoft QLinearAveragePool over borders, ceil-mode overhang, both counts and the whole image (its
    global path): one program op, the per-step path's bits."""
    from onnx import TensorProto, helper
    rng = np.random.default_rng(12)
    elem = TensorProto.UINT8 if dtype == np.uint8 else TensorProto.INT8
    nodes = [node("QLinearAveragePool", ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft", **attrs)]
    inits = [const("xs", np.array(0.06, np.float32)), const("xz", np.array(5 if dtype == np.uint8 else -5, dtype)),
             const("ys", np.array(0.05, np.float32)), const("yz", np.array(9 if dtype == np.uint8 else 2, dtype))]
    onnx_model = model(nodes, [helper.make_tensor_value_info("x", elem, [2, 3, 7, 9])], [helper.make_tensor_value_info("y", elem, None)],
                       inits, opset=13)
    onnx_model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    info = np.iinfo(dtype)
    feeds = {"x": rng.integers(info.min, info.max + 1, (2, 3, 7, 9)).astype(dtype)}
    compiled_model, ours, python = run_both(onnx_model, feeds, monkeypatch)
    (plan,) = compiled_model._plans.values()
    assert plan.stats()["native_nodes"] == 1
    np.testing.assert_array_equal(ours["y"], python["y"])


def test_div_scaled_gelus_run_in_the_program_with_the_traced_bits():
    """An exporter's Erf GELU that divides by √2 (after a MatMul+bias and on its own) runs as the compiled
    GELU_DIV in the native program, with the bits of the traced run's kernels."""
    from tests.kernels.kernel_graphs import transformer_block
    compiled_model = compile_model(transformer_block())
    feeds = {"x": np.random.default_rng(2).standard_normal((2, 4, 8)).astype(np.float32)}
    traced, planned = (compiled_model.run(feeds)["out"].copy() for _ in range(2))
    (plan,) = compiled_model._plans.values()
    gelus = [e for node, e in zip(plan.graph.nodes, plan.emitted) if node.op_type in ("Gelu", "MatMulBias")]
    assert len(gelus) == 2 and all(e is not None for e in gelus), plan.graph.nodes
    assert np.array_equal(traced, planned)


@pytest.mark.parametrize("stride", [1, 2])
def test_a_depthwise_convolution_with_a_chain_runs_in_the_program_with_the_traced_bits(stride):
    """A depthwise Conv followed by an element-wise chain (HardSwish, a per-channel scale): the depthwise
    kernel then the chain in place on its output, as the fused kernel's traced run computes it."""
    rng = np.random.default_rng(4)
    f32 = np.float32
    nodes = [node("Conv", ["x", "dw", "b"], ["c"], group=8, pads=[1, 1, 1, 1], strides=[stride, stride]),
             node("HardSigmoid", ["c"], ["hs"], alpha=0.2, beta=0.5), node("Mul", ["c", "hs"], ["swish"]),
             node("Mul", ["swish", "scale"], ["y"])]
    inits = [const("dw", rng.standard_normal((8, 1, 3, 3)).astype(f32)), const("b", rng.standard_normal(8).astype(f32)),
             const("scale", rng.standard_normal((8, 1, 1)).astype(f32))]
    compiled_model = compile_model(model(nodes, [("x", [1, 8, 9, 9])], [("y", None)], inits))
    feeds = {"x": rng.standard_normal((1, 8, 9, 9)).astype(f32)}
    traced, planned = (compiled_model.run(feeds)["y"].copy() for _ in range(2))
    (plan,) = compiled_model._plans.values()
    assert [n.op_type for n in plan.graph.nodes] == ["ConvActivation"] and plan.stats()["native_nodes"] == 1
    assert np.array_equal(traced, planned)


def test_sums_along_contiguous_elements_run_in_the_program_pairwise_with_the_traced_bits():
    """GlobalAveragePool (small and large planes), ReduceMean over the last two axes and ReduceSum along the last:
    the compiled pairwise sum in the traced run's kernels and in the program's REDUCE, the same bits; within a
    few float32 ulps of the exact mean even over 300 000 elements (pairwise: error growing with log n)."""
    nodes = [node("GlobalAveragePool", ["x"], ["pooled"]), node("GlobalAveragePool", ["big"], ["big_pooled"]),
             node("ReduceMean", ["x", "last_two"], ["mean"]), node("ReduceSum", ["x", "last"], ["sum"], keepdims=0)]
    inits = [const("last_two", np.array([2, 3], np.int64)), const("last", np.array([-1], np.int64))]
    outputs = ["pooled", "big_pooled", "mean", "sum"]
    onnx_model = model(nodes, [("x", [2, 8, 7, 9]), ("big", [1, 2, 500, 600])], [(n, None) for n in outputs], inits, opset=18)
    rng = np.random.default_rng(7)
    feeds = {"x": rng.standard_normal((2, 8, 7, 9)).astype(np.float32),
             "big": (rng.random((1, 2, 500, 600)) + 1).astype(np.float32)}
    compiled_model = compile_model(onnx_model)
    traced, planned = ({k: v.copy() for k, v in compiled_model.run(feeds).items()} for _ in range(2))
    (plan,) = compiled_model._plans.values()
    assert plan.stats()["native_nodes"] == len(nodes)
    for name in outputs:
        np.testing.assert_array_equal(traced[name], planned[name], err_msg=name)
    exact = feeds["big"].astype(np.float64).mean(axis=(2, 3), keepdims=True)
    np.testing.assert_allclose(planned["big_pooled"], exact, rtol=4 * np.finfo(np.float32).eps)
    np.testing.assert_allclose(planned["mean"], feeds["x"].astype(np.float64).mean(axis=(2, 3), keepdims=True), rtol=1e-6, atol=1e-7)


def test_nearest_resizes_are_copies_in_the_program_and_linear_ones_resample():
    """Nearest upsampling by whole factors (2 and 4, and 3 along one axis) becomes one strided copy with zero
    strides for the repeats; a non-whole factor a gather; a linear Resize computes: a RESAMPLE per resized axis."""
    nodes = [node("Resize", ["x", "", "two"], ["up2"], mode="nearest", coordinate_transformation_mode="asymmetric",
                  nearest_mode="floor"),
             node("Resize", ["x", "", "mixed"], ["up_mixed"], mode="nearest", coordinate_transformation_mode="asymmetric",
                  nearest_mode="floor"),
             node("Resize", ["x", "", "odd"], ["up_odd"], mode="nearest"),
             node("Resize", ["x", "", "two"], ["linear"], mode="linear")]
    inits = [const("two", np.array([1, 1, 2, 2], np.float32)), const("mixed", np.array([1, 1, 4, 3], np.float32)),
             const("odd", np.array([1, 1, 1.5, 1], np.float32))]
    outputs = ["up2", "up_mixed", "up_odd", "linear"]
    compiled_model = compile_model(model(nodes, [("x", [1, 3, 6, 5])], [(n, None) for n in outputs], inits, opset=13))
    feeds = {"x": np.random.default_rng(8).standard_normal((1, 3, 6, 5)).astype(np.float32)}
    traced, planned = ({k: v.copy() for k, v in compiled_model.run(feeds).items()} for _ in range(2))
    (plan,) = compiled_model._plans.values()
    emitted = dict(zip((n.outputs[0] for n in plan.graph.nodes), plan.emitted))
    copies = [[op for op in emitted[name].ops] for name in ("up2", "up_mixed")]
    assert all(len(ops) == 1 and ops[0].opcode == emit.COPY for ops in copies), copies
    assert emitted["up_odd"] is not None and [op.opcode for op in emitted["linear"].ops] == [emit.RESAMPLE] * 2
    for name in outputs:
        np.testing.assert_array_equal(traced[name], planned[name], err_msg=name)
    np.testing.assert_array_equal(planned["up_mixed"], feeds["x"].repeat(4, axis=2).repeat(3, axis=3))


@pytest.mark.parametrize("threads", [1, 2])
def test_large_copies_shared_among_threads_move_the_same_bytes(threads, monkeypatch, native_threads):
    """Copies past a thread's share of bytes (an FPN's nearest upsampling and Concat, a transpose, a slice, a
    one-axis run, int64 elements) split their runs among the threads: the NumPy kernels' values exactly."""
    nodes = [node("Resize", ["x", "", "two"], ["up"], mode="nearest", coordinate_transformation_mode="asymmetric",
                  nearest_mode="floor"),
             node("Resize", ["x", "", "three"], ["up3"], mode="nearest", coordinate_transformation_mode="asymmetric",
                  nearest_mode="floor"),
             node("Concat", ["up", "big"], ["cat"], axis=1),
             node("Transpose", ["cat"], ["t"], perm=[0, 2, 3, 1]),
             node("Slice", ["cat", "starts", "ends", "axes"], ["sl"]),
             node("Reshape", ["cat", "flat_shape"], ["flat"]), node("Concat", ["flat", "flat"], ["runs"], axis=0),
             node("Concat", ["ids", "ids"], ["ids2"], axis=2)]
    inits = [const("two", np.array([1, 1, 2, 2], np.float32)), const("three", np.array([1, 1, 3, 1], np.float32)),
             const("starts", np.array([1, 3], np.int64)), const("ends", np.array([60, 61], np.int64)),
             const("axes", np.array([1, 3], np.int64)), const("flat_shape", np.array([-1], np.int64))]
    outputs = ["up3", "t", "sl", "runs", "ids2"]
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 64, 64, 64])
    ids2 = helper.make_tensor_value_info("ids2", TensorProto.INT64, None)
    onnx_model = model(nodes, [("x", [1, 40, 32, 32]), ("big", [1, 24, 64, 64]), ids], [(n, None) for n in outputs[:-1]] + [ids2],
                       inits, opset=13)
    rng = np.random.default_rng(9)
    feeds = {"x": rng.standard_normal((1, 40, 32, 32)).astype(np.float32),
             "big": rng.standard_normal((1, 24, 64, 64)).astype(np.float32),
             "ids": rng.integers(-1 << 40, 1 << 40, (1, 64, 64, 64))}
    native_threads(threads)
    compiled_model, ours, python = run_both(onnx_model, feeds, monkeypatch)
    (plan,) = compiled_model._plans.values()
    assert plan.stats()["native_nodes"] == len(nodes)
    for name in outputs:
        np.testing.assert_array_equal(ours[name], python[name], err_msg=name)


def test_an_additive_attentions_broadcast_add_runs_in_the_program_with_the_traced_bits():
    """Additive attention's Unsqueeze, Unsqueeze, Add, Tanh (tashkeel's (1, 96, 1, 512) + (1, 1, 96, 512), smaller):
    the first operand's broadcast axis sits between its spanned ones, read as planes by the program's CHAIN op;
    the planned run gives the traced run's bits, and NumPy's broadcasting with the Tanh kernel's values."""
    from rtd.kernels.native import activation
    nodes = [node("Unsqueeze", ["w", "two"], ["wu"]), node("Unsqueeze", ["u", "one"], ["uu"]),
             node("Add", ["wu", "uu"], ["s"]), node("Tanh", ["s"], ["scores"])]
    inits = [const("one", np.array([1], np.int64)), const("two", np.array([2], np.int64))]
    onnx_model = model(nodes, [("w", [1, 24, 40]), ("u", [1, 24, 40])], [("scores", None)], inits)
    rng = np.random.default_rng(19)
    feeds = {name: rng.standard_normal((1, 24, 40)).astype(np.float32) * 2 for name in ("w", "u")}
    compiled_model = compile_model(onnx_model)
    traced, planned = (compiled_model.run(feeds)["scores"].copy() for _ in range(2))
    (plan,) = compiled_model._plans.values()
    chains = [e for n, e in zip(plan.graph.nodes, plan.emitted) if n.op_type == "ElementwiseChain"]
    assert len(chains) == 1 and chains[0] is not None, plan.graph.nodes   # the chain is a CHAIN op of the program
    assert np.array_equal(traced, planned)
    want = activation.activation(activation.TANH, feeds["w"][:, :, None, :] + feeds["u"][:, None, :, :])
    np.testing.assert_array_equal(planned, want)


def test_a_python_step_between_native_ones_runs_first_and_int32_indices_gather_natively():
    """An int32 counter step (a Python call: chains are float32) feeds a Gather by int32 index: the plan runs
    the counter first so the ReLU, the Gather and the Softmax are one program, and the Gather widens its
    indices into scratch rather than staying a Python call."""
    nodes = [node("Relu", ["x"], ["r"]), node("Add", ["i", "one"], ["k"]), node("Gather", ["r", "k"], ["g"], axis=0),
             node("Softmax", ["x"], ["s"], axis=-1)]
    onnx_model = typed_model(nodes, [("x", TensorProto.FLOAT), ("i", TensorProto.INT32)],
                             [("g", TensorProto.FLOAT), ("s", TensorProto.FLOAT)], [("one", np.array([1, -2], np.int32))])
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((5, 4)).astype(np.float32), "i": np.array([0, 4], np.int32)}
    compiled_model = compile_model(onnx_model)
    ours = [compiled_model.run(feeds) for _ in range(2)][-1]
    (plan,) = compiled_model._plans.values()
    assert plan.stats()["native_segments"] == 1 and len(plan.steps) == 2, plan.labels
    reference = ort.InferenceSession(onnx_model, providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_array_equal(ours["g"], reference[0])
    np.testing.assert_allclose(ours["s"], reference[1], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("width,bias", [(5, True), (37, False), (64, True)])
def test_layernorm_runs_as_the_compiled_row_kernel(width, bias, monkeypatch):
    """The fused LayerNorm (here from the ONNX op, with and without beta; widths with and without an 8-lane
    tail) is one LAYERNORM op of the program, bit for bit the kernel's own run and the unfused ONNX op's (they
    call the same C: a dynamically quantized model turns a last-bit difference into a quantization step), and
    onnxruntime's values."""
    rng = np.random.default_rng(width)
    inputs = ["x", "g", "beta"] if bias else ["x", "g"]
    inits = [const("g", rng.standard_normal(width).astype(np.float32)), const("beta", rng.standard_normal(width).astype(np.float32))]
    onnx_model = model([node("LayerNormalization", inputs, ["y"], axis=-1, epsilon=1e-5)], [("x", [3, 4, width])], [("y", None)],
                       inits[: len(inputs) - 1])
    feeds = {"x": (rng.standard_normal((3, 4, width)) * 3 + 1).astype(np.float32)}
    compiled_model, ours, python = run_both(onnx_model, feeds, monkeypatch)
    (plan,) = compiled_model._plans.values()
    assert plan.stats()["native_nodes"] == 1 and plan.stats()["ops"] == {"LayerNorm": 1}
    np.testing.assert_array_equal(ours["y"], python["y"])
    np.testing.assert_array_equal(ours["y"], compile_model(onnx_model, optimize=False).run(feeds)["y"])
    expected = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(ours["y"], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("masked,div", [(True, True), (False, False), (True, False)])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_fused_attention_runs_in_the_program_with_the_traced_bits(masked, div, threads, monkeypatch, native_threads):
    """q @ kt, the scale and mask, the row softmax and @ v: batched GEMMs (the heads shared among the threads), a
    chain and the softmax in one program, the traced run's bits; within rounding of the NumPy steps it replaced."""
    from tests.kernels.test_fusion_properties import attention_model
    onnx_model, inputs = attention_model(2, 4, 96, 32, masked, div)   # big enough that the heads are shared
    rng = np.random.default_rng(11)
    feeds = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in inputs}
    if masked:
        feeds["mask"] = np.where(feeds["mask"] > 0.5, -1e4, 0).astype(np.float32)
    native_threads(threads)
    ours = compile_model(onnx_model)
    traced, planned = (ours.run(feeds)["y"].copy() for _ in range(2))
    (plan,) = ours._plans.values()
    (attention,) = [e for node, e in zip(plan.graph.nodes, plan.emitted) if node.op_type == "Attention"]
    assert attention is not None and [op.opcode for op in attention.ops] == [emit.MATMUL, emit.CHAIN, emit.SOFTMAX, emit.MATMUL]
    np.testing.assert_array_equal(traced, planned)
    native_threads(1)
    np.testing.assert_array_equal(compile_model(onnx_model).run(feeds)["y"], planned)
    want = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(planned, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("width", [9, 11, 16, 47, 70])
@pytest.mark.parametrize("attrs", [dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1),
                                   dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
                                   dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
                                   dict(kernel_shape=[3, 2], strides=[1, 1], pads=[2, 0, 1, 1], count_include_pad=1),
                                   dict(kernel_shape=[2, 3], strides=[1, 2], dilations=[2, 2], pads=[0, 2, 1, 0]),
                                   dict(kernel_shape=[3, 3], strides=[3, 3], ceil_mode=1, pads=[1, 1, 1, 1], count_include_pad=1),
                                   dict(kernel_shape=[18, 3], strides=[1, 2], pads=[9, 1, 9, 1])])
def test_average_pooling_runs_in_the_program_with_the_traced_runs_bits_and_onnxruntimes_values(attrs, width):
    """AveragePool over float32 rows narrow and wide (pool.c's 8-column blocks and the row's tail block at strides
    1 and 2, read from copies in the tensor's last rows; the other columns window by window), over borders, both
    counts, ceil-mode overhang and dilations: one program op, the traced run's bits (its kernel calls the same C),
    onnxruntime's values."""
    shape = [2, 3, 8 if width < 32 else 9, width]
    onnx_model = model([node("AveragePool", ["x"], ["y"], **attrs)], [("x", shape)], [("y", None)], [], opset=19)
    x = np.random.default_rng(14).standard_normal(shape).astype(np.float32) * 5
    x[1, 2, 4, 7] = np.inf
    compiled_model = compile_model(onnx_model)
    traced, planned = (compiled_model.run({"x": x})["y"] for _ in range(2))
    (plan,) = compiled_model._plans.values()
    assert plan.stats()["native_nodes"] == 1
    np.testing.assert_array_equal(planned, traced)
    reference = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(planned, reference, rtol=1e-5, atol=1e-6)


def dynamic_integer_model(pads):
    """Two float inputs each quantized by DynamicQuantizeLinear: x's codes through a ConvInteger at the run's zero
    point (pads, strides, a weight zero point) and again at a constant one; v's through a MatMulInteger at
    the run's zero point; every output of the quantizations exported too."""
    rng = np.random.default_rng(15)
    nodes = [node("DynamicQuantizeLinear", ["x"], ["q", "qs", "qz"]),
             node("ConvInteger", ["q", "w", "qz", "wz"], ["c"], pads=pads, strides=[1, 2]),
             node("ConvInteger", ["q", "w", "cz"], ["cc"], kernel_shape=[3, 3]),
             node("DynamicQuantizeLinear", ["v"], ["p", "ps", "pz"]),
             node("MatMulInteger", ["p", "b", "pz", "bz"], ["m"])]
    inits = [const("w", rng.integers(0, 256, (6, 3, 3, 3)).astype(np.uint8)), const("wz", np.array(119, np.uint8)),
             const("cz", np.array(131, np.uint8)), const("b", rng.integers(0, 256, (16, 5)).astype(np.uint8)),
             const("bz", np.array(128, np.uint8))]
    outputs = [("q", TensorProto.UINT8), ("qs", TensorProto.FLOAT), ("qz", TensorProto.UINT8), ("c", TensorProto.INT32),
               ("cc", TensorProto.INT32), ("p", TensorProto.UINT8), ("ps", TensorProto.FLOAT), ("pz", TensorProto.UINT8),
               ("m", TensorProto.INT32)]
    return model(nodes, [("x", [2, 3, 9, 11]), ("v", [2, 4, 16])], [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
                 inits, opset=13)


@pytest.mark.parametrize("pads", [[1, 1, 1, 1], [0, 2, 1, 0]])
def test_dynamic_quantization_and_integer_products_run_in_one_program_with_onnxruntimes_values(pads):
    """DynamicQuantizeLinear, and ConvInteger and MatMulInteger reading the zero point the run computed (or a constant
    one), are program ops: the whole graph one step, the traced run's bits, and onnxruntime's codes, scales, zero
    points and exact int32 sums."""
    onnx_model = dynamic_integer_model(pads)
    rng = np.random.default_rng(16)
    feeds = {"x": rng.standard_normal((2, 3, 9, 11)).astype(np.float32) * 3 + 1,
             "v": rng.standard_normal((2, 4, 16)).astype(np.float32) - 2}
    compiled_model = compile_model(onnx_model)
    traced, planned = (compiled_model.run(feeds) for _ in range(2))
    (plan,) = compiled_model._plans.values()
    stats = plan.stats()
    assert stats["steps"] == 1 and stats["native_nodes"] == 5, stats
    session = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"])
    for info, expected in zip(session.get_outputs(), session.run(None, feeds)):
        np.testing.assert_array_equal(planned[info.name], traced[info.name], err_msg=info.name)
        assert planned[info.name].dtype == expected.dtype, info.name
        np.testing.assert_array_equal(planned[info.name], expected, err_msg=info.name)


def test_a_nan_before_dynamic_quantization_is_refused_by_the_traced_and_the_planned_run_alike():
    """A NaN leaves DynamicQuantizeLinear no zero point: the traced run and the program both refuse the input with
    E_INPUT_INVALID, and the next good input still runs."""
    from rtd.errors import Code, RtdError
    compiled_model = compile_model(dynamic_integer_model([1, 1, 1, 1]))
    rng = np.random.default_rng(17)
    good = {"x": rng.standard_normal((2, 3, 9, 11)).astype(np.float32), "v": rng.standard_normal((2, 4, 16)).astype(np.float32)}
    bad = {**good, "v": good["v"].copy()}
    bad["v"][1, 2, 3] = np.nan
    for _ in range(2):   # the first run traces, the second runs the program
        with pytest.raises(RtdError) as refused:
            compiled_model.run(bad)
        assert refused.value.code == Code.E_INPUT_INVALID
        want = compiled_model.run(good)
    np.testing.assert_array_equal(compiled_model.run(good)["m"], want["m"])


def test_the_traced_run_and_the_plan_share_one_centred_copy_and_one_set_of_panels_per_integer_weight():
    """ConvInteger's weights less their zero point, and the panels packed from them, are made once per weight and zero
    point whichever kernel asks (the traced run's, then the plan's emitter): two ConvIntegers over one weight at two
    zero points keep two of each, not four."""
    from rtd.kernels.native import packed
    before = set(packed._kept)
    compiled_model = compile_model(dynamic_integer_model([1, 1, 1, 1]))
    rng = np.random.default_rng(18)
    feeds = {"x": rng.standard_normal((2, 3, 9, 11)).astype(np.float32), "v": rng.standard_normal((2, 4, 16)).astype(np.float32)}
    for _ in range(2):
        compiled_model.run(feeds)
    made = [key[1][0] for key in set(packed._kept) - before]
    assert made.count("centred") == 2 and made.count("conv") == 2, made


def test_a_window_taller_than_the_tail_copy_still_pools_in_vector_blocks_with_the_numpy_kernels_values():
    """A window of 18 rows (more than the tail block's copies hold) over a map too large for the separable pass: its
    interior columns in whole vector blocks, the rest one by one, a NaN and signed zeros included: the MaxPool kernel's
    NumPy values."""
    from rtd.kernels.ops._pool import max_pool
    x = np.random.default_rng(19).standard_normal((1, 2, 40, 520)).astype(np.float32)
    x[0, 1, 20, 100] = np.nan
    want, _ = max_pool(np, x, [18, 2], [1, 1], [1, 1], [4, 0, 4, 0], "NOTSET", 0, 0, False)
    got = np.empty_like(want)
    ffi, lib = compiled.ffi, compiled.lib
    status = lib.rtd_max_pool2d_f32(ffi.from_buffer("float[]", x), x.size, ffi.from_buffer("float[]", got, require_writable=True),
                                    got.size, *x.shape, 18, 2, *want.shape[2:], 1, 1, 1, 1, 4, 0)
    assert status == 0
    np.testing.assert_array_equal(got, want)
