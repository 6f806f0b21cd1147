"""8-bit QLinear kernels against onnxruntime, which is the anchor (onnx.reference lacks com.microsoft);
where its uint8 × int8 product saturates on this host, against its exact u8u8 path (quantized_reference.py).

Each case is a one-node model built with onnx.helper over odd shapes, uint8 and int8, per-tensor
and (QLinearConv, QLinearMatMul) per-channel parameters; the scales and zero points are random
per case and, except where noted, initializers. Every comparison is exact: each kernel repeats
onnxruntime's float32 steps (round half to even, saturation, its operation order). Wider random
sweeps run while writing them also showed no difference at all: QLinearAdd and QLinearMul every
one of the 65,536 pairs under 720 parameter sets each, the lookup ops 102,400 table entries,
QLinearAveragePool 1.06 million elements, QLinearConv 1.12 million, QLinearConcat 467,000,
QLinearMatMul 186,000, QLinearGlobalAveragePool 117,000.
"""
import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from rtd.loader import onnx_guard
from rtd.errors import Code, RtdError
from rtd.kernels import compile_model
from rtd.kernels.ops import supported

from tests.kernels.quantized_reference import PAIR_SAFE_WEIGHT, onnxruntime_reference
from tests.zoo.models import ZOO

RNG = np.random.default_rng(90)
EIGHT_BIT = [np.uint8, np.int8]


def _model(op, inputs, consts, inputs_order=None, domain="com.microsoft", out_dtype=None, **attrs) -> bytes:
    """Fed inputs in0.., initializers c0.. (None: an omitted optional input); `inputs_order` lists the
    node's inputs by position in inputs + consts."""
    names = [f"in{i}" for i in range(len(inputs))]
    inits = [numpy_helper.from_array(np.asarray(c), f"c{i}") for i, c in enumerate(consts) if c is not None]
    every = names + [f"c{i}" if c is not None else "" for i, c in enumerate(consts)]
    order = inputs_order if inputs_order is not None else range(len(every))
    node = helper.make_node(op, [every[i] for i in order], ["out"], domain=domain, **attrs)
    out_type = helper.np_dtype_to_tensor_dtype(np.dtype(out_dtype or inputs[0].dtype))
    graph = helper.make_graph(
        [node], op,
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape) for n, x in zip(names, inputs)],
        [helper.make_tensor_value_info("out", out_type, None)], initializer=inits)
    return helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]).SerializeToString()


def _exact(op, inputs, consts, **kw):
    """rtd's output equal to the reference's; returns the reference (which session judged it)."""
    model = _model(op, inputs, consts, **kw)
    feeds = {f"in{i}": x for i, x in enumerate(inputs)}
    ours = compile_model(model).run(feeds)["out"]
    reference = onnxruntime_reference(model)
    theirs = reference.run(feeds)[0]
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, (op, ours.shape, theirs.shape)
    np.testing.assert_array_equal(ours, theirs, err_msg=f"{op} against {reference}")
    return reference


def _q(dtype, shape, bound=None):
    """Random values of an 8-bit type, or within ±bound."""
    info = np.iinfo(dtype)
    lo, hi = (info.min, info.max) if bound is None else (-bound, bound)
    return RNG.integers(lo, hi + 1, shape).astype(dtype)


def _zp(dtype):
    info = np.iinfo(dtype)
    return dtype(RNG.integers(info.min // 2, info.max // 2 + 1))


def _scale(lo=0.005, hi=0.1):
    return np.float32(RNG.uniform(lo, hi))


# A broadcast along the innermost axis takes onnxruntime's scalar path (another float32 order),
# so shapes cover: equal, trailing vector, inner-axis broadcast of either side, whole scalars.
BINARY_SHAPES = [((3, 5, 7), (3, 5, 7)), ((3, 5, 7), (7,)), ((3, 5, 7), (5, 1)), ((3, 5, 7), ()),
                 ((1,), (3, 5, 7)), ((5, 1), (3, 5, 7)), ((3, 1, 7), (3, 5, 1)), ((2, 33, 65), (2, 33, 65))]


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("dtype", EIGHT_BIT)
@pytest.mark.parametrize("shapes", BINARY_SHAPES, ids=str)
def test_binary_matches_onnxruntime(op, dtype, shapes):
    for zero_points in (True, False):  # False: symmetric (0); onnxruntime's type inference needs them present
        a, b = _q(dtype, shapes[0]), _q(dtype, shapes[1])
        zps = [_zp(dtype) if zero_points else dtype(0) for _ in range(3)]
        consts = [_scale(), zps[0], _scale(), zps[1], _scale(), zps[2]]
        _exact(op, [a, b], consts, inputs_order=[0, 2, 3, 1, 4, 5, 6, 7])


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("dtype", EIGHT_BIT)
@pytest.mark.parametrize("broadcast", ["none", "a", "b"])
def test_binary_matches_onnxruntime_on_every_pair(op, dtype, broadcast):
    """All 65,536 (a, b) pairs in each float32 operation order onnxruntime uses: neither input, A, or B
    broadcast along the innermost axis; rare near-ties (a sum within 1e-5 of .5) tell the orders apart."""
    values = np.arange(256, dtype=np.uint8).view(dtype)
    grid = np.ascontiguousarray(np.broadcast_to(values[None, :], (256, 256)))
    a, b = {"none": (grid.T.copy(), grid), "a": (values[:, None].copy(), grid), "b": (grid, values[:, None].copy())}[broadcast]
    for _ in range(16):
        consts = [_scale(), _zp(dtype), _scale(), _zp(dtype), _scale(), _zp(dtype)]
        _exact(op, [a, b], consts, inputs_order=[0, 2, 3, 1, 4, 5, 6, 7])


@pytest.mark.parametrize("op, attrs", [("QLinearSigmoid", {}), ("QLinearLeakyRelu", {}),
                                       ("QLinearLeakyRelu", {"alpha": 0.3})])
@pytest.mark.parametrize("dtype", EIGHT_BIT)
def test_lookup_ops_match_onnxruntime_on_every_byte(op, attrs, dtype):
    x = np.arange(256, dtype=np.uint8).view(dtype).reshape(2, 8, 16)
    for _ in range(20):
        _exact(op, [x], [_scale(0.01, 0.2), _zp(dtype), _scale(0.002, 0.02), _zp(dtype)], **attrs)


def test_lookup_ops_take_parameters_fed_at_run_time():
    """Scales fed as inputs: the table follows them from call to call."""
    x = np.arange(256, dtype=np.uint8).reshape(16, 16)
    for scale in (0.05, 0.11, 0.05):
        params = [np.array(scale, np.float32), np.array(100, np.uint8), np.array(0.004, np.float32), np.array(0, np.uint8)]
        _exact("QLinearSigmoid", [x, *params], [])


@pytest.mark.parametrize("dtype", EIGHT_BIT)
@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize("shape", [(2, 5, 7, 9), (1, 3, 11), (2, 4, 3, 5, 6)], ids=str)
def test_global_average_pool_matches_onnxruntime(dtype, channels_last, shape):
    _exact("QLinearGlobalAveragePool", [_q(dtype, shape)], [_scale(), _zp(dtype), _scale(), _zp(dtype)],
           channels_last=channels_last)


POOL_CASES = [
    ((2, 5, 9, 11), {"kernel_shape": [3, 3]}),
    ((2, 5, 9, 11), {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1]}),
    ((2, 5, 9, 11), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    ((2, 5, 9, 11), {"kernel_shape": [3, 3], "strides": [2, 3], "ceil_mode": 1}),
    ((2, 5, 9, 11), {"kernel_shape": [3, 3], "strides": [2, 3], "ceil_mode": 1, "count_include_pad": 1,
                     "pads": [1, 1, 0, 0]}),
    ((2, 5, 9, 11), {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((2, 5, 9, 11), {"kernel_shape": [9, 11]}),  # the whole image: onnxruntime's integer global path
    ((2, 3, 13), {"kernel_shape": [4], "strides": [3]}),
    ((1, 3, 5, 6, 7), {"kernel_shape": [2, 3, 2], "pads": [1, 0, 1, 0, 1, 1]}),
]


@pytest.mark.parametrize("dtype", EIGHT_BIT)
@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize("shape, attrs", POOL_CASES, ids=lambda v: str(v))
def test_average_pool_matches_onnxruntime(dtype, channels_last, shape, attrs):
    x = _q(dtype, shape)
    if channels_last:
        x = np.ascontiguousarray(np.moveaxis(x, 1, -1))
    _exact("QLinearAveragePool", [x], [_scale(), _zp(dtype), _scale(), _zp(dtype)], channels_last=channels_last,
           **attrs)


@pytest.mark.parametrize("dtype", EIGHT_BIT)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat_matches_onnxruntime(dtype, axis):
    """Three inputs: two requantized through tables, one already in y's scale and zero point (copied)."""
    shapes = [(2, 3, 4), (2, 3, 4), (2, 3, 4)]
    shapes = [tuple(s if d != axis % 3 else s + i for d, s in enumerate(shape)) for i, shape in enumerate(shapes)]
    xs = [_q(dtype, s) for s in shapes]
    y_scale, y_zp = _scale(), _zp(dtype)
    consts = [y_scale, y_zp, _scale(), _zp(dtype), y_scale, y_zp, _scale(), _zp(dtype)]
    _exact("QLinearConcat", xs, consts, inputs_order=[3, 4, 0, 5, 6, 1, 7, 8, 2, 9, 10], axis=axis)


CONV_CASES = [  # every plan of _conv; 300 input channels take the float64 accumulation
    ((1, 8, 9, 9), (4, 8, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 6, 7, 5), (6, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1]}),
    ((1, 64, 12, 12), (16, 64, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ((2, 16, 5, 5), (8, 16, 1, 1), {}),
    ((1, 12, 8, 8), (6, 4, 3, 1), {"group": 3, "dilations": [2, 1]}),
    ((1, 300, 6, 6), (5, 300, 3, 3), {}),
]


# (x type, w type, w's bound): uint8 × int8 over the whole int8 range, then within ±PAIR_SAFE_WEIGHT,
# where no two u8·s8 products can leave int16, so onnxruntime's own u8s8 path is the anchor on every host.
PRODUCT_TYPES = [pytest.param(np.uint8, np.int8, None, id="uint8-int8"),
                 pytest.param(np.uint8, np.int8, PAIR_SAFE_WEIGHT, id="uint8-int8_pairs_within_int16"),
                 pytest.param(np.uint8, np.uint8, None, id="uint8-uint8"),
                 pytest.param(np.int8, np.int8, None, id="int8-int8")]


def _judged_as_written(reference, w_bound):
    """Weights within ±PAIR_SAFE_WEIGHT keep the model as written: onnxruntime's u8s8 kernel itself is compared."""
    assert w_bound is None or not reference.reexpressed, reference


@pytest.mark.parametrize("x_type, w_type, w_bound", PRODUCT_TYPES)
@pytest.mark.parametrize("per_channel", [0, 1])
@pytest.mark.parametrize("x_shape, w_shape, attrs", CONV_CASES, ids=str)
def test_qlinear_conv_matches_onnxruntime(x_type, w_type, w_bound, per_channel, x_shape, w_shape, attrs):
    m = w_shape[0]
    w_zp = (RNG.integers(100, 150, m) if per_channel else RNG.integers(100, 150)) if w_type == np.uint8 else \
        (np.zeros(m) if per_channel else 0)
    w_scale = RNG.uniform(0.001, 0.01, m if per_channel else ()).astype(np.float32)
    consts = [np.float32(0.02), _zp(x_type), _q(w_type, w_shape, w_bound), w_scale, np.asarray(w_zp).astype(w_type),
              _scale(0.05, 0.5), _zp(x_type), RNG.integers(-5000, 5000, m).astype(np.int32)]
    _judged_as_written(_exact("QLinearConv", [_q(x_type, x_shape)], consts, domain="", **attrs), w_bound)


@pytest.mark.parametrize("a_type, b_type, b_bound", PRODUCT_TYPES)
@pytest.mark.parametrize("per_column", [0, 1])
@pytest.mark.parametrize("a_shape, b_shape", [((5, 7), (7, 3)), ((2, 4, 600), (600, 9)), ((2, 3, 5, 8), (8, 6))],
                         ids=str)
def test_qlinear_matmul_matches_onnxruntime(a_type, b_type, b_bound, per_column, a_shape, b_shape):
    n = b_shape[-1]
    b_scale = RNG.uniform(0.001, 0.01, n if per_column else ()).astype(np.float32)
    b_zp = _q(b_type, (n,), b_bound) if per_column else _zp(b_type)
    consts = [np.float32(0.02), _zp(a_type), _q(b_type, b_shape, b_bound), b_scale, b_zp, _scale(0.5, 5), _zp(a_type)]
    _judged_as_written(_exact("QLinearMatMul", [_q(a_type, a_shape)], consts, domain=""), b_bound)


@pytest.mark.parametrize("op, attrs, needle", [
    ("QLinearAveragePool", {}, "kernel_shape"),
    ("QLinearAveragePool", {"kernel_shape": [0, 3]}, "kernel_shape"),
    ("QLinearAveragePool", {"kernel_shape": [3, 3], "strides": [1]}, "strides"),
    ("QLinearAveragePool", {"kernel_shape": [3, 3], "auto_pad": "SAME"}, "auto_pad"),
    ("QLinearAveragePool", {"kernel_shape": [3, 3], "count_include_pad": 2}, "count_include_pad"),
    ("QLinearGlobalAveragePool", {"channels_last": 3}, "channels_last"),
    ("QLinearLeakyRelu", {"alpha": float("nan")}, "alpha"),
    ("QLinearConcat", {}, "axis"),
])
def test_bad_attributes_are_refused_at_compile_time(op, attrs, needle):
    """Refused by compile_model (at load), naming the op and the attribute, never at first inference."""
    x = np.zeros((1, 2, 4, 4), np.uint8)
    with pytest.raises(RtdError) as e:
        compile_model(_model(op, [x], [np.float32(0.1), np.uint8(0), np.float32(0.1), np.uint8(0)], **attrs))
    assert e.value.code is Code.E_MODEL_INVALID
    assert op in str(e.value) and needle in str(e.value)


def test_unsupported_types_and_per_channel_parameters_are_refused():
    """E_OP_UNSUPPORTED: types and parameters the model itself fixes (the request's types are
    checked against the declared ones before), so the worker's warm-up refuses such a load."""
    floats = _model("QLinearSigmoid", [np.zeros((2, 3), np.float32)],
                    [np.float32(0.1), np.float32(0), np.float32(0.1), np.float32(0)])
    with pytest.raises(RtdError) as e:
        compile_model(floats).run({"in0": np.zeros((2, 3), np.float32)})
    assert e.value.code is Code.E_OP_UNSUPPORTED and "QLinearSigmoid" in str(e.value)
    a = np.zeros((2, 3), np.uint8)
    per_channel = _model("QLinearAdd", [a, a], [np.full(3, 0.1, np.float32), np.uint8(0), np.float32(0.1),
                                                np.uint8(0), np.float32(0.1), np.uint8(0)],
                         inputs_order=[0, 2, 3, 1, 4, 5, 6, 7])
    with pytest.raises(RtdError) as e:
        compile_model(per_channel).run({"in0": a, "in1": a})
    assert e.value.code is Code.E_OP_UNSUPPORTED and "A_scale" in str(e.value)


@pytest.mark.parametrize("name", ["cnn_qop", "cnn_qop_s8"])
def test_quantized_cnn_passes_the_workers_guard_and_matches_onnxruntime_exactly(name):
    """The static QOperator CNN (every QLinear op above) passes the worker's allow-list, and its
    dequantized logits equal onnxruntime's over 20 random batches: 0 units of difference."""
    path = ZOO[name].path()
    data = open(path, "rb").read()
    onnx_guard.check_model(data, allowed_ops=set(supported()))
    ours = compile_model(data)
    reference = onnxruntime_reference(data)
    for seed in range(20):
        feeds = {"image": np.random.default_rng(seed).standard_normal((3, 3, 32, 32), dtype=np.float32)}
        np.testing.assert_array_equal(ours.run(feeds)["logits"], reference.run(feeds)[0], err_msg=str(reference))
    assert {n.op_type for n in onnx.load(path).graph.node} >= {
        "QLinearConv", "QLinearAdd", "QLinearMul", "QLinearConcat", "QLinearSigmoid", "QLinearLeakyRelu",
        "QLinearAveragePool", "QLinearGlobalAveragePool", "QLinearMatMul"}
