"""com.microsoft DynamicQuantizeLSTM, as onnxruntime's dynamic quantizer makes it from an LSTM, against
onnxruntime and against the float LSTM it came from."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import QuantType, quantize_dynamic

from rtd.errors import Code, RtdError
from rtd.kernels import compile_model
from rtd.kernels.graph import make_kernel
from rtd.kernels.ir import Node
from tests.zoo.compare import DEEP_QUANTIZED_TOLERANCE

INPUT, HIDDEN = 16, 32


def lstm_pair(tmp_path, direction: str, ragged: bool):
    """(float LSTM bytes, its dynamically quantized form's bytes)."""
    rng = np.random.default_rng(7)
    dirs = 2 if direction == "bidirectional" else 1
    inits = {"W": rng.standard_normal((dirs, 4 * HIDDEN, INPUT)) * 0.3, "R": rng.standard_normal((dirs, 4 * HIDDEN, HIDDEN)) * 0.3,
             "B": rng.standard_normal((dirs, 8 * HIDDEN)) * 0.1, "h0": rng.standard_normal((dirs, 3, HIDDEN)) * 0.5,
             "c0": rng.standard_normal((dirs, 3, HIDDEN)) * 0.5}
    inputs = ["x", "W", "R", "B", "lens" if ragged else "", "h0", "c0"]
    node = helper.make_node("LSTM", inputs, ["y", "yh", "yc"], hidden_size=HIDDEN, direction=direction)
    feeds = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3, INPUT])]
    if ragged:
        feeds.append(helper.make_tensor_value_info("lens", TensorProto.INT32, [3]))
    graph = helper.make_graph([node], "g", feeds, [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "yh", "yc")],
                              [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "float.onnx")
    quantize_dynamic(tmp_path / "float.onnx", tmp_path / "quantized.onnx", weight_type=QuantType.QInt8)
    quantized = (tmp_path / "quantized.onnx").read_bytes()
    assert "DynamicQuantizeLSTM" in [n.op_type for n in onnx.load_from_string(quantized).graph.node]
    return model.SerializeToString(), quantized


def _run_ort(data, feeds):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("direction,ragged", [("bidirectional", False), ("forward", True), ("reverse", True)])
def test_matches_onnxruntime_within_its_saturation(tmp_path, direction, ragged):
    """Within the tolerance onnxruntime's own product allows (on AVX2 without VNNI its uint8 x int8 pairs
    saturate at int16, which rtd's exact sums do not), and as near the float LSTM as onnxruntime is."""
    float_model, quantized = lstm_pair(tmp_path, direction, ragged)
    x = np.random.default_rng(1).standard_normal((20, 3, INPUT)).astype(np.float32)
    feeds = {"x": x} | ({"lens": np.array([20, 13, 1], np.int32)} if ragged else {})
    ours = list(compile_model(quantized).run(feeds).values())
    theirs, exact = _run_ort(quantized, feeds), _run_ort(float_model, feeds)
    for a, b, f in zip(ours, theirs, exact):
        assert a.shape == b.shape and a.dtype == np.float32
        assert np.abs(a - b).max() <= DEEP_QUANTIZED_TOLERANCE * max(1.0, np.abs(b).max())
        assert np.abs(a - f).max() <= 2 * np.abs(b - f).max()
    if ragged:   # past a sequence's length its outputs are zeros, as onnxruntime writes them
        assert not ours[0][13:, :, 1].any() and not ours[0][1:, :, 2].any()


def test_zero_points_onnxruntime_cannot_take_are_refused(tmp_path):
    _, quantized = lstm_pair(tmp_path, "forward", False)
    model = onnx.load_from_string(quantized)
    for t in model.graph.initializer:
        if t.name.endswith("zero_point") and t.name.startswith("R"):
            t.CopyFrom(numpy_helper.from_array(np.array([3], np.int8), t.name))
    with pytest.raises(RtdError) as e:
        compile_model(model.SerializeToString()).run({"x": np.zeros((2, 3, INPUT), np.float32)})
    assert e.value.code is Code.E_MODEL_INVALID and "zero_point" in e.value.detail


# ---- against a plain NumPy statement of the op ----

def _quantize_reference(a):
    """a (float32) to uint8 per tensor as onnxruntime's dynamic quantization defines it, less the zero point."""
    low, high = min(float(a.min()), 0.0), max(float(a.max()), 0.0)
    scale = np.float32(1) if low == high else (np.float32(high) - np.float32(low)) / np.float32(255)
    zero = np.rint(np.clip(-(np.float32(low) / scale), 0, 255))
    return (np.clip(np.rint(a / scale) + zero, 0, 255) - zero).astype(np.int64), float(scale)


def _reference_steps(x, w, r, b, w_scale, r_scale, h0, c0, direction, lens, y):
    """Each step of each direction from the op's definition (exact int64 sums, float64 gates), its H taken from
    `y` (rtd's outputs), so that an 8-bit level flipped by rounding at a quantization boundary cannot carry over
    into later steps: returns the reference Y (seq, dirs, batch, hidden) for y to match step by step."""
    seq, batch, _ = x.shape
    dirs, hidden = r.shape[:2]
    qx, sx = _quantize_reference(x.reshape(seq * batch, -1))
    out = np.zeros((seq, dirs, batch, hidden))
    for d in range(dirs):
        back = direction == "reverse" or d == 1
        projected = (qx @ w[d].astype(np.int64)).reshape(seq, batch, -1) * (sx * w_scale[d].astype(np.float64))
        h, c = h0[d].astype(np.float64), c0[d].astype(np.float64)
        for t in range(seq):
            alive = t < lens
            pos = np.where(back, lens - 1 - t, t).clip(0)   # each row's position of this step
            qh, sh = _quantize_reference(h.astype(np.float32))
            gates = projected[pos, np.arange(batch)] + (qh @ r[d].astype(np.int64)) * (sh * r_scale[d].astype(np.float64)) \
                + b[d, :4 * hidden] + b[d, 4 * hidden:]
            i, o, f, cell = (gates[:, k * hidden:(k + 1) * hidden] for k in range(4))
            sigmoid = lambda v: 1 / (1 + np.exp(-v))   # noqa: E731
            c_new = sigmoid(f) * c + sigmoid(i) * np.tanh(cell)
            h_new = sigmoid(o) * np.tanh(c_new)
            for row in np.nonzero(alive)[0]:
                out[pos[row], d, row] = h_new[row]
                c[row] = c_new[row]
                h[row] = y[pos[row], d, row]   # rtd's H, as rounded, for the next step
    return out


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("seq,batch,hidden,ragged", [(1, 1, 16, False), (7, 3, 20, False), (40, 1, 24, False),
                                                     (12, 3, 20, True)])
def test_matches_a_numpy_statement_of_the_op(monkeypatch, direction, seq, batch, hidden, ragged):
    """Both directions, short and long sequences, hidden sizes off the 8-lane vectors, per-direction and per-column
    scales: without sequence lengths the compiled recurrence (which the spy sees), with them the NumPy steps; the
    input projection the compiled 8-bit product either way."""
    from rtd.kernels.native import compiled
    from rtd.kernels.ops import op_ms_dynamic_quantize_lstm as module
    taken, native, projected, product = [], module.lstm_q8, [], module.quant.matmul_8bit

    def spy(*args):
        taken.append(native(*args))
        return taken[-1]
    monkeypatch.setattr(module, "lstm_q8", spy)
    monkeypatch.setattr(module.quant, "matmul_8bit", lambda *args, **kw: projected.append(product(*args, **kw)) or projected[-1])
    rng = np.random.default_rng(seq * 100 + hidden)
    dirs, size = 2 if direction == "bidirectional" else 1, 10
    w = rng.integers(-127, 128, (dirs, size, 4 * hidden)).astype(np.int8)
    r = rng.integers(-127, 128, (dirs, hidden, 4 * hidden)).astype(np.int8)
    w_scale = rng.uniform(0.5, 1.5, dirs).astype(np.float32) / 254   # per direction
    r_scale = rng.uniform(0.5, 1.5, (dirs, 4 * hidden)).astype(np.float32) / 127 / np.sqrt(hidden)   # per gate column
    b = (rng.standard_normal((dirs, 8 * hidden)) * 0.1).astype(np.float32)
    h0, c0 = (rng.standard_normal((2, dirs, batch, hidden)) * 0.5).astype(np.float32)
    x = rng.standard_normal((seq, batch, size)).astype(np.float32)
    lens = np.array([seq, seq // 2, 1][:batch] if ragged else [seq] * batch, np.int32)
    inits = {"W": w, "R": r, "B": b, "h0": h0, "c0": c0, "W_scale": w_scale, "W_zero_point": np.zeros(dirs, np.int8),
             "R_scale": r_scale, "R_zero_point": np.zeros((dirs, 4 * hidden), np.int8), "lens": lens}
    node = helper.make_node("DynamicQuantizeLSTM", ["x", "W", "R", "B", "lens", "h0", "c0", "", "W_scale", "W_zero_point",
                                                    "R_scale", "R_zero_point"], ["y", "yh", "yc"], domain="com.microsoft",
                            hidden_size=hidden, direction=direction)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "yh", "yc")],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    y, yh, yc = compile_model(model.SerializeToString()).run({"x": x}).values()
    expected = _reference_steps(x, w, r, b, w_scale, r_scale, h0, c0, direction, lens, y)
    assert y.shape == (seq, dirs, batch, hidden) and np.abs(y - expected).max() < 2e-5
    for d in range(dirs):   # Y_h: each row's last step in its direction's order
        last = np.zeros(batch, int) if direction == "reverse" or d == 1 else lens - 1
        np.testing.assert_array_equal(yh[d], y[last, d, np.arange(batch)])
    assert np.abs(yc).max() > 0
    assert taken == ([] if ragged or compiled is None else [True])
    assert len(projected) == (dirs if compiled is not None else 1)   # a product per direction, W's bytes as stored
    assert (projected[0] is not None) == (compiled is not None)


@pytest.mark.parametrize("ragged", [False, True])
def test_a_nan_in_h_makes_its_directions_outputs_nan(tmp_path, ragged):
    """H is quantized per tensor at every step: one NaN in the forward direction's initial H makes its scale NaN,
    and so every gate of that direction from the first step on (the reverse direction's stay finite), on the
    compiled path (no sequence lengths) and the NumPy steps alike."""
    _, quantized = lstm_pair(tmp_path, "bidirectional", ragged)
    model = onnx.load_from_string(quantized)
    for t in model.graph.initializer:
        if t.name == "h0":
            h0 = numpy_helper.to_array(t).copy()
            h0[0, 1, 3] = np.nan
            t.CopyFrom(numpy_helper.from_array(h0, "h0"))
    x = np.random.default_rng(2).standard_normal((5, 3, INPUT)).astype(np.float32)
    feeds = {"x": x} | ({"lens": np.array([5, 5, 4], np.int32)} if ragged else {})
    y, yh, yc = compile_model(model.SerializeToString()).run(feeds).values()
    assert np.isnan(y[:4, 0]).all() and np.isnan(yh[0]).all() and np.isnan(yc[0]).all()
    assert np.isfinite(y[:, 1]).all() and np.isfinite(yh[1]).all() and np.isfinite(yc[1]).all()


@pytest.mark.parametrize("shift", [0.0, 3.0, -3.0])
def test_x_is_quantized_by_the_compiled_passes_as_by_numpys(shift):
    """The compiled projection's quantization of X (quant.c's range and quantization passes) gives the NumPy steps'
    bytes, zero point and scale to the bit: ranges across 0, all above it, all below it, and all zeros."""
    kernel = make_kernel(Node("DynamicQuantizeLSTM", "com.microsoft", [], ["y"], {"hidden_size": 4}),
                         {"": 14, "com.microsoft": 1}, np)
    rng = np.random.default_rng(int(shift) + 7)
    for rows in (rng.standard_normal((96, 512)).astype(np.float32) + np.float32(shift), np.zeros((3, 5), np.float32)):
        q, zero, scale = kernel._x_bytes(rows)
        want_q, want_zero, want_scale = kernel._quantized_bytes(rows)
        np.testing.assert_array_equal(q, want_q.astype(np.uint8))
        assert zero == int(want_zero.reshape(())) and scale.tobytes() == want_scale.reshape(()).tobytes()


def test_a_transposed_input_takes_the_compiled_8bit_projection(tmp_path):
    """X arriving as a transposed view (a CRNN's feature map turned by a Transpose and a Reshape into one sequence's
    rows: column-major) is quantized into contiguous bytes for the compiled 8-bit projection: the float copy of W
    (four bytes a weight) is never made, in the traced run or the plan's, and the outputs are those of the same X
    given contiguous."""
    from rtd.kernels.native import packed
    _, quantized = lstm_pair(tmp_path, "bidirectional", False)
    model = onnx.load_from_string(quantized)
    lstm = next(n for n in model.graph.node if n.op_type == "DynamicQuantizeLSTM")
    lstm.input[5], lstm.input[6] = "", ""   # no initial states: a batch of one
    model.graph.node.insert(0, helper.make_node("Transpose", ["map"], ["turned"], perm=[3, 0, 1, 2]))
    model.graph.node.insert(1, helper.make_node("Reshape", ["turned", "rows"], ["x"]))
    model.graph.initializer.append(numpy_helper.from_array(np.array([20, 1, INPUT], np.int64), "rows"))
    model.graph.input[0].CopyFrom(helper.make_tensor_value_info("map", TensorProto.FLOAT, [1, INPUT, 1, 20]))
    feature_map = np.random.default_rng(2).standard_normal((1, INPUT, 1, 20)).astype(np.float32)
    before = set(packed._kept)
    compiled_model = compile_model(model.SerializeToString())
    got = [compiled_model.run({"map": feature_map}) for _ in range(2)]
    assert [key[1][0] for key in set(packed._kept) - before].count("dynamic-quantize-lstm") == 0
    del model.graph.node[:2], model.graph.initializer[-1]
    model.graph.input[0].CopyFrom(helper.make_tensor_value_info("x", TensorProto.FLOAT, [20, 1, INPUT]))
    want = compile_model(model.SerializeToString()).run({"x": np.ascontiguousarray(feature_map.transpose(3, 0, 1, 2).reshape(20, 1, INPUT))})
    for run in got:
        for name, value in want.items():
            np.testing.assert_array_equal(run[name], value, err_msg=name)
