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
