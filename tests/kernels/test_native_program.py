"""Whole-plan native execution (kernels/emit.py, kernels/native/program.{py,c}): a plan's runs of compiled
steps as one C program. The program gives the per-step Python path's bits exactly (same kernels, exact
copies), at one thread and two; values that leave the plan are not arena bytes a later run overwrites; the
interpreter refuses operands outside their slots and writes into read-only slots with a status."""
import numpy as np
import onnxruntime as ort
import pytest

import rtd.kernels.plan as plan_module
from rtd.kernels import compile_model, emit, native
from rtd.kernels.native import compiled
from tests.kernels.kernel_graphs import const, model, node

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
def test_native_program_gives_the_per_step_paths_and_onnxruntimes_values(threads, monkeypatch):
    onnx_model = mixed_graph()
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)}
    native.set_threads(threads)
    try:
        compiled_model, ours, python = run_both(onnx_model, feeds, monkeypatch)
    finally:
        native.set_threads(1)
    (plan,) = compiled_model._plans.values()
    stats = plan.stats()
    assert stats["native_segments"] >= 1 and stats["native_nodes"] >= sum(stats["ops"].values()) - 2, stats   # all but the mean along a row and AveragePool
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


def test_nearest_resizes_are_copies_in_the_program_and_linear_ones_stay_python():
    """Nearest upsampling by whole factors (2 and 4, and 3 along one axis) becomes one strided copy with zero
    strides for the repeats; a non-whole factor a gather; a linear Resize computes, so it is no copy at all."""
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
    assert emitted["up_odd"] is not None and emitted["linear"] is None
    for name in outputs:
        np.testing.assert_array_equal(traced[name], planned[name], err_msg=name)
    np.testing.assert_array_equal(planned["up_mixed"], feeds["x"].repeat(4, axis=2).repeat(3, axis=3))
