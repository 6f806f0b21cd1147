"""Convolution, pooling, normalization, recurrent and quantized kernels beyond the onnx node tests.

Each case is a one-node ONNX model run through rtd and through onnxruntime on the same random
inputs; the shapes are picked to drive every plan the kernels choose between (pointwise,
depthwise, pixel-major and channel-major convolution; pooled Indices in both storage orders;
ragged bidirectional recurrences). Scratch buffers are per thread, so concurrent runs are
checked too, and refusals are checked for their stable codes. Where onnxruntime's uint8 × int8
product saturates on this host, the reference is its exact u8u8 path (quantized_reference.py).
"""
import threading

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnxruntime.quantization import QuantType, quantize_dynamic

from rtd.errors import Code, RtdError
from rtd.kernels import compile_model

from tests.kernels.quantized_reference import PAIR_SAFE_WEIGHT, onnxruntime_reference

RNG = np.random.default_rng(11)


def _model(op, inputs, consts=(), n_out=1, opset=21, **attrs):
    """Fed inputs named in0.., initializers c0..; an empty string in `consts` skips an optional input."""
    names = [f"in{i}" for i in range(len(inputs))]
    inits = [numpy_helper.from_array(c, f"c{i}") for i, c in enumerate(consts) if c is not None]
    const_names = [f"c{i}" if c is not None else "" for i, c in enumerate(consts)]
    node = helper.make_node(op, names + const_names, [f"out{i}" for i in range(n_out)], **attrs)
    graph = helper.make_graph(
        [node], op,
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape) for n, x in zip(names, inputs)],
        [helper.make_empty_tensor_value_info(f"out{i}") for i in range(n_out)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    return onnx.shape_inference.infer_shapes(model).SerializeToString()


def _against_ort(op, inputs, consts=(), n_out=1, opset=21, rtol=1e-4, atol=1e-5, **attrs):
    model = _model(op, inputs, consts, n_out, opset, **attrs)
    feeds = {f"in{i}": x for i, x in enumerate(inputs)}
    ours = compile_model(model).run(feeds)
    reference = onnxruntime_reference(model)
    for i, expected in enumerate(reference.run(feeds)):
        got = ours[f"out{i}"]
        assert got.dtype == expected.dtype and got.shape == expected.shape, (op, i, got.shape, expected.shape)
        if expected.dtype.kind == "f":
            np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, err_msg=f"{op} output {i} against {reference}")
        else:
            np.testing.assert_array_equal(got, expected, err_msg=f"{op} output {i} against {reference}")
    return ours


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


CONV_CASES = [  # (x shape, w shape, attrs): each plan of _conv, with odd pads, strides and dilations
    ((2, 16, 9, 9), (8, 16, 1, 1), {}),  # pointwise: one GEMM over NCHW
    ((1, 64, 20, 20), (8, 64, 3, 3), {"pads": [1, 1, 1, 1]}),  # pixel-major im2col
    ((2, 32, 18, 18), (4, 32, 3, 3), {"pads": [0, 1, 2, 1], "strides": [1, 1], "dilations": [2, 1]}),
    ((1, 3, 17, 15), (8, 3, 7, 7), {"pads": [3, 3, 3, 3], "strides": [2, 2]}),  # channel-major
    ((2, 12, 10, 10), (6, 4, 3, 3), {"group": 3, "pads": [1, 1, 1, 1], "strides": [2, 1]}),  # grouped
    ((1, 8, 11, 11), (8, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1], "dilations": [2, 2]}),  # depthwise, wide rows
    ((2, 8, 12, 9), (8, 1, 5, 3), {"group": 8, "pads": [2, 0, 1, 2]}),  # depthwise, asymmetric pads
    ((1, 8, 11, 11), (8, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1], "strides": [2, 2]}),  # depthwise, per-tap views
    ((2, 6, 13), (4, 6, 3), {"pads": [2, 1], "strides": [2]}),  # 1-D
    ((1, 4, 5, 6, 7), (3, 4, 2, 3, 2), {"pads": [1, 0, 1, 0, 1, 1]}),  # 3-D
    ((1, 16, 7, 8), (8, 16, 3, 3), {"auto_pad": "SAME_LOWER", "strides": [2, 2]}),
    ((1, 16, 32, 32), (8, 16, 1, 1), {"strides": [2, 2]}),  # 1x1 with stride: not pointwise
]


@pytest.mark.parametrize("x_shape, w_shape, attrs", CONV_CASES)
def test_conv_plans_match_onnxruntime(x_shape, w_shape, attrs):
    _against_ort("Conv", [_f32(*x_shape)], [_f32(*w_shape), _f32(w_shape[0])], **attrs)


def test_conv_half_precision_accumulates_in_float32():
    x, w = _f32(1, 32, 12, 12).astype(np.float16), _f32(16, 32, 3, 3).astype(np.float16)
    _against_ort("Conv", [x], [w], rtol=2e-3, atol=2e-3, pads=[1, 1, 1, 1])


@pytest.mark.parametrize("attrs", [
    {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]},
    {"group": 2, "dilations": [2, 1]},
    {"output_shape": [11, 12], "strides": [2, 2]},
])
def test_conv_transpose_matches_onnxruntime(attrs):
    _against_ort("ConvTranspose", [_f32(2, 4, 5, 6)], [_f32(4, 3, 3, 3), _f32(3 * attrs.get("group", 1))],
                 kernel_shape=[3, 3], **attrs)


@pytest.mark.parametrize("kernel, attrs", [
    ([2, 2], {"strides": [2, 2]}),                           # the taps tile the output: placed by one copy
    ([2, 3], {"strides": [2, 3], "group": 2}),
    ([4], {"strides": [4]}),                                 # 1-D
    ([2, 2], {"strides": [2, 2], "output_padding": [1, 0]}),  # an extra row: the scatter-add path
    ([2, 2], {"strides": [2, 2], "pads": [1, 0, 0, 1]}),
])
@pytest.mark.parametrize("bias", [True, False])   # with a bias, it is added as each tap is placed
def test_conv_transpose_whose_taps_do_not_overlap_matches_onnxruntime(kernel, attrs, bias):
    c, m, g = 4, 3, attrs.get("group", 1)
    x = _f32(2, c, 5, 6) if len(kernel) == 2 else _f32(2, c, 7)
    _against_ort("ConvTranspose", [x], [_f32(c, m, *kernel)] + ([_f32(m * g)] if bias else []), kernel_shape=kernel, **attrs)


@pytest.mark.parametrize("storage_order", [0, 1])
@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [2, 3], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "dilations": [2, 2], "pads": [2, 1, 0, 1]},
])
def test_maxpool_values_and_indices_match_onnxruntime(attrs, storage_order):
    x = _f32(2, 3, 11, 10)
    _against_ort("MaxPool", [x], n_out=2, storage_order=storage_order, **attrs)


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("ceil_mode", [0, 1])
def test_averagepool_counts_match_onnxruntime(count_include_pad, ceil_mode):
    _against_ort("AveragePool", [_f32(1, 4, 10, 9)], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 0, 1],
                 count_include_pad=count_include_pad, ceil_mode=ceil_mode)


def test_gemm_folds_alpha_beta_and_transposes():
    a, b = _f32(5, 7), _f32(6, 5)  # A' is 7x5, B' is 5x6
    _against_ort("Gemm", [a, b], [_f32(1, 6)], alpha=0.5, beta=-2.0, transA=1, transB=1)
    _against_ort("Gemm", [a.T.copy()], [b.T.copy(), _f32(7, 1)], beta=0.0)


def test_layer_and_group_normalization_match_onnxruntime():
    x = _f32(2, 6, 5, 4) * 3 + 1
    _against_ort("LayerNormalization", [x], [_f32(5, 4), _f32(5, 4)], n_out=3, axis=2, epsilon=1e-3, opset=17)
    _against_ort("BatchNormalization", [x], [_f32(6), _f32(6), _f32(6), np.abs(_f32(6)) + 0.1], opset=15)
    _against_ort("InstanceNormalization", [x], [_f32(6), _f32(6)])


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_recurrent_ragged_bidirectional_matches_onnxruntime(op):
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    seq, batch, inp, hidden = 5, 3, 4, 6
    x = _f32(seq, batch, inp)
    w, r = _f32(2, gates * hidden, inp) * 0.5, _f32(2, gates * hidden, hidden) * 0.5
    consts = [w, r, _f32(2, 2 * gates * hidden), np.array([5, 2, 4], np.int32), _f32(2, batch, hidden)]
    attrs = {"hidden_size": hidden, "direction": "bidirectional"}
    if op == "LSTM":
        consts += [_f32(2, batch, hidden), _f32(2, 3 * hidden)]  # initial_c and peepholes
    if op == "GRU":
        attrs["linear_before_reset"] = 1
    _against_ort(op, [x], consts, n_out=3 if op == "LSTM" else 2, **attrs)


def test_lstm_clip_and_custom_activations_match_onnxruntime():
    x = _f32(4, 2, 3) * 4
    w, r = _f32(1, 16, 3), _f32(1, 16, 4)
    _against_ort("LSTM", [x], [w, r], n_out=3, hidden_size=4, clip=0.7,
                 activations=["HardSigmoid", "LeakyRelu", "Softsign"], activation_alpha=[0.3, 0.05],
                 activation_beta=[0.4])


def test_quantized_conv_and_matmul_match_onnxruntime():
    x = RNG.integers(0, 255, (1, 8, 9, 9), dtype=np.uint8)
    w = RNG.integers(-127, 127, (4, 8, 3, 3), dtype=np.int8)
    w_scale = (np.abs(_f32(4)) * 0.01 + 0.001).astype(np.float32)
    consts = [np.float32(0.02), np.uint8(120), w, w_scale, np.zeros(4, np.int8), np.float32(0.5), np.uint8(128),
              RNG.integers(-500, 500, 4, dtype=np.int32)]
    _against_ort("QLinearConv", [x], consts, opset=13, pads=[1, 1, 1, 1])
    a = RNG.integers(0, 255, (5, 7), dtype=np.uint8)
    b = RNG.integers(0, 255, (7, 3), dtype=np.uint8)
    _against_ort("MatMulInteger", [a], [b, np.uint8(3), np.uint8(200)], opset=13)
    _against_ort("DynamicQuantizeLinear", [_f32(4, 9)], n_out=3, opset=13)


@pytest.mark.parametrize("a_dtype, b_dtype, b_shape, compiled", [
    (np.uint8, np.int8, (512, 1), True), (np.int8, np.uint8, (512, 33), True), (np.uint8, np.uint8, (512, 130), True),
    (np.uint8, np.int8, (3, 512, 5), False)])   # a batched B: the float GEMMs
def test_matmul_integer_is_summed_from_the_bytes_exactly(monkeypatch, a_dtype, b_dtype, b_shape, compiled):
    """MatMulInteger with a 2-D B is the compiled kernel's (an additive attention's 96 x 96 x 512 scores by one
    vector, smaller here; odd column counts for the kernel's pairs of columns), a batched B the float GEMMs':
    either way NumPy's exact integer product and onnxruntime's."""
    from rtd.kernels.native import quant
    calls, matmul_8bit = [], quant.matmul_8bit
    monkeypatch.setattr(quant, "matmul_8bit", lambda *args: calls.append(args) or matmul_8bit(*args))
    info_a, info_b = np.iinfo(a_dtype), np.iinfo(b_dtype)
    a = RNG.integers(info_a.min, info_a.max + 1, (3, 190, 512), dtype=a_dtype)
    b = RNG.integers(info_b.min, info_b.max + 1, b_shape, dtype=b_dtype)
    a_zero, b_zero = a_dtype(info_a.max - 30), b_dtype(info_b.min + 5)
    got = _against_ort("MatMulInteger", [a], [b, a_zero, b_zero], opset=13)["out0"]
    assert bool(calls) == compiled
    want = (a.astype(np.int64) - int(a_zero)) @ (b.astype(np.int64) - int(b_zero))
    np.testing.assert_array_equal(got, want)


def test_dynamic_quantize_linear_is_the_specs_to_the_bit():
    """Scale, zero point and values equal onnx.reference's exactly (the test above allows the scale a relative
    1e-4 of onnxruntime's): the scale is taken in float32 steps, where the range over 255 in float64, rounded
    once, is an ulp off for about 1 range in 4."""
    proto = _model("DynamicQuantizeLinear", [_f32(64)], n_out=3, opset=13)
    model, spec = compile_model(proto), ReferenceEvaluator(proto)
    for x in (_f32(64) * np.float32(RNG.uniform(0.1, 10)) for _ in range(40)):
        got = model.run({"in0": x})
        for i, want in enumerate(spec.run(None, {"in0": x})):
            assert got[f"out{i}"].dtype == want.dtype and np.array_equal(got[f"out{i}"], want), (i, got, want)


@pytest.mark.parametrize("fill", [-200.0, -3.4e38, 200.0])
def test_softmax_rows_that_need_the_shift_match_onnxruntime(fill):
    """Softmax first tries exp without the row-max shift; rows where every term underflows, or
    where a term would overflow, must come out as with the shift (a fully masked row: uniform)."""
    x = _f32(3, 64, 130)  # over one L2 block: the blocked path
    x[0, 1, :] = fill
    x[1, :, 5:] = fill
    _against_ort("Softmax", [x], axis=-1, opset=13)


def test_concurrent_runs_do_not_share_scratch_buffers():
    x1, x2 = _f32(1, 64, 20, 20), _f32(1, 64, 20, 20)
    model = compile_model(_model("Conv", [x1], [_f32(8, 64, 3, 3)], pads=[1, 1, 1, 1]))
    want = {id(x): model.run({"in0": x})["out0"] for x in (x1, x2)}
    failures = []

    def hammer(x):
        for _ in range(30):
            if not np.array_equal(model.run({"in0": x})["out0"], want[id(x)]):
                failures.append(id(x))

    threads = [threading.Thread(target=hammer, args=(x,)) for x in (x1, x2, x1, x2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


def test_refusals_carry_stable_codes():
    with pytest.raises(RtdError) as err:
        compile_model(_model("Conv", [_f32(1, 4, 5, 5)], [_f32(2, 4, 3, 3)], fancy=1))
    assert err.value.code is Code.E_OP_UNSUPPORTED
    model = compile_model(_model("Conv", [_f32(1, 4, 5, 5)], [_f32(2, 4, 3, 3)]))
    with pytest.raises(RtdError) as err:
        model.run({"in0": _f32(1, 4, 5, 5)[:, :3]})
    assert err.value.code is Code.E_INPUT_INVALID


def _ms_against_ort(op, inputs, consts=(), outputs=(0,), rtol=1e-4, atol=1e-5, **attrs):
    """A com.microsoft contrib node against onnxruntime, which implements the domain natively; returns the reference."""
    names = [f"in{i}" for i in range(len(inputs))]
    inits = [numpy_helper.from_array(c, f"c{i}") for i, c in enumerate(consts) if c is not None]
    const_names = [f"c{i}" if c is not None else "" for i, c in enumerate(consts)]
    out_names = [f"out{i}" if i in outputs else "" for i in range(max(outputs) + 1)]
    node = helper.make_node(op, names + const_names, out_names, domain="com.microsoft", **attrs)
    graph = helper.make_graph(
        [node], op,
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape) for n, x in zip(names, inputs)],
        [helper.make_tensor_value_info(f"out{i}", onnx.TensorProto.FLOAT, None) for i in outputs], initializer=inits)
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17),
                                                                   helper.make_opsetid("com.microsoft", 1)]).SerializeToString()
    feeds = {n: x for n, x in zip(names, inputs)}
    ours = compile_model(model).run(feeds)
    reference = onnxruntime_reference(model)
    for i, expected in zip(outputs, reference.run(feeds)):
        np.testing.assert_allclose(ours[f"out{i}"], expected, rtol=rtol, atol=atol, err_msg=f"{op} output {i} against {reference}")
    return reference


def test_contrib_activations_and_fused_matmul_match_onnxruntime():
    x = _f32(3, 5, 8) * 2
    _ms_against_ort("Gelu", [x])
    _ms_against_ort("BiasGelu", [x], [_f32(8)])
    _ms_against_ort("FastGelu", [x], [_f32(8)], atol=1e-4)
    _ms_against_ort("FusedMatMul", [x], [_f32(6, 8)], alpha=0.25, transB=1)


def test_contrib_skip_layer_normalization_matches_onnxruntime():
    x, skip = _f32(2, 7, 16), _f32(2, 7, 16)
    _ms_against_ort("SkipLayerNormalization", [x, skip], [_f32(16), _f32(16), _f32(16)], outputs=(0, 3), epsilon=1e-5)


@pytest.mark.parametrize("bound", [127, PAIR_SAFE_WEIGHT])
def test_contrib_quantized_matmuls_match_onnxruntime(bound):
    """uint8 × int8 weights within ±bound; within ±PAIR_SAFE_WEIGHT no two products can leave int16, so
    onnxruntime's own u8s8 kernels are the reference on every host."""
    a = _f32(4, 6, 16)
    b = RNG.integers(-bound, bound + 1, (16, 5), dtype=np.int8)
    b_scale = np.float32(0.03)
    references = [_ms_against_ort("DynamicQuantizeMatMul", [a], [b, b_scale, np.int8(0), _f32(5)], rtol=0, atol=1e-5)]
    qa = RNG.integers(0, 255, (4, 16), dtype=np.uint8)
    references.append(_ms_against_ort("MatMulIntegerToFloat", [qa], [b, np.float32(0.02), b_scale, np.uint8(128), np.int8(0), _f32(5)]))
    assert bound > PAIR_SAFE_WEIGHT or not any(r.reexpressed for r in references), references


@pytest.mark.parametrize("op, attrs", [
    ("GlobalLpPool", {"p": 3}),
    ("GlobalMaxPool", {}),
    ("GlobalAveragePool", {}),
    ("LpPool", {"p": 1, "kernel_shape": [2, 3], "strides": [2, 1], "pads": [1, 0, 0, 1]}),
    ("LRN", {"size": 5, "alpha": 2e-3, "beta": 0.6, "bias": 1.5}),
    ("MeanVarianceNormalization", {"axes": [0, 2, 3]}),
    ("LpNormalization", {"axis": 1, "p": 1}),
])
def test_window_and_normalization_ops_match_onnxruntime(op, attrs):
    _against_ort(op, [_f32(2, 5, 6, 7)], opset=17, **attrs)


@pytest.mark.parametrize("weight_type", ["QInt8", "QUInt8"])
def test_onnxruntime_dynamic_quantizer_output_matches_onnxruntime(tmp_path, weight_type):
    """quantize_dynamic's graph (DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul) must agree exactly."""
    inits = [numpy_helper.from_array(_f32(32, 64), "w1"), numpy_helper.from_array(_f32(64), "b1"),
             numpy_helper.from_array(_f32(64, 10), "w2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["h2"]),
             helper.make_node("Relu", ["h2"], ["h3"]), helper.make_node("MatMul", ["h3", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 32])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", 10])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), tmp_path / "m.onnx")
    quantize_dynamic(tmp_path / "m.onnx", tmp_path / "q.onnx", weight_type=getattr(QuantType, weight_type))
    model = (tmp_path / "q.onnx").read_bytes()
    assert {n.op_type for n in onnx.load_from_string(model).graph.node} >= {"DynamicQuantizeLinear", "MatMulInteger"}
    x = _f32(5, 32)
    reference = onnxruntime_reference(model)
    np.testing.assert_allclose(compile_model(model).run({"x": x})["y"], reference.run({"x": x})[0], rtol=1e-6, atol=1e-5,
                               err_msg=str(reference))


@pytest.mark.parametrize("mask_kind", ["none", "lengths", "raw", "unidirectional", "past"])
def test_contrib_attention_matches_onnxruntime(mask_kind):
    batch, seq, hidden, heads = 2, 5, 16, 4
    x = _f32(batch, seq, hidden)
    consts = [_f32(hidden, 3 * hidden) * 0.3, _f32(3 * hidden)]
    attrs = {"num_heads": heads}
    if mask_kind == "lengths":
        consts.append(np.array([5, 3], np.int32))
    elif mask_kind == "raw":
        consts.append(np.array([[1, 1, 0, 1, 1], [1, 0, 0, 0, 1]], np.int32))
    elif mask_kind == "unidirectional":
        attrs["unidirectional"] = 1
    elif mask_kind == "past":
        consts += [None, _f32(2, batch, heads, 3, hidden // heads)]
        attrs["unidirectional"] = 1
    outputs = (0, 1) if mask_kind == "past" else (0,)
    _ms_against_ort("Attention", [x], consts, outputs=outputs, **attrs)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_recurrent_batch_major_layout_is_the_transpose_of_time_major(op):
    """layout=1 (batch-major) must equal layout=0 on transposed inputs, outputs transposed back."""
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    seq, batch, inp, hidden = 4, 3, 5, 2
    x, h0 = _f32(seq, batch, inp), _f32(2, batch, hidden)
    w, r, b = _f32(2, gates * hidden, inp), _f32(2, gates * hidden, hidden), _f32(2, 2 * gates * hidden)
    lens = np.array([4, 1, 3], np.int32)
    states = [h0, _f32(2, batch, hidden)] if op == "LSTM" else [h0]
    n_out = len(states) + 1
    run = {}
    for layout in (0, 1):
        xs = x if layout == 0 else x.transpose(1, 0, 2).copy()
        ss = [s if layout == 0 else s.transpose(1, 0, 2).copy() for s in states]
        model = _model(op, [xs], [w, r, b, lens, *ss], n_out=n_out, opset=14, hidden_size=hidden,
                       direction="bidirectional", layout=layout)
        run[layout] = compile_model(model).run({"in0": xs})
    np.testing.assert_allclose(run[1]["out0"], run[0]["out0"].transpose(2, 0, 1, 3), rtol=1e-6)
    for i in range(1, n_out):
        np.testing.assert_allclose(run[1][f"out{i}"], run[0][f"out{i}"].transpose(1, 0, 2), rtol=1e-6)
