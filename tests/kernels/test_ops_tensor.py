"""Tensor, shape, indexing and resampling kernels beyond the onnx node tests.

Resize and Gather are checked against onnxruntime on random NCHW / embedding inputs (the
shapes detectors and encoders use); the random ops by their distributions and seeding;
the shape ops by the views they return; bad inputs by their refusal codes; Resize's
strided fast path against its generic gather path (hypothesis).
"""
import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from rtd.errors import Code, RtdError
from rtd.kernels import compile_model
from rtd.kernels.ops import _resize, lookup

RNG = np.random.default_rng()


def _model(node, inputs, outputs, opset, initializers=()):
    graph = helper.make_graph([node], "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def _against_ort(model_bytes, feeds):
    ours = compile_model(model_bytes).run(feeds)
    session = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    theirs = session.run(None, feeds)
    return list(ours.values()), theirs


def _kernel(op, opset, attrs=None):
    return lookup("", op, opset)(attrs or {}, np)


RESIZE_CASES = [
    ("nearest", "asymmetric", "floor", 0, (2.0, 2.0)),
    ("nearest", "half_pixel", "round_prefer_floor", 0, (2.0, 2.0)),
    ("nearest", "half_pixel", "round_prefer_ceil", 0, (0.5, 0.75)),
    ("nearest", "align_corners", "ceil", 0, (2.0, 3.0)),
    ("nearest", "pytorch_half_pixel", "round_prefer_floor", 0, (3.0, 0.6)),
    ("linear", "half_pixel", "round_prefer_floor", 0, (2.0, 2.0)),
    ("linear", "align_corners", "round_prefer_floor", 0, (2.0, 4.0)),
    ("linear", "asymmetric", "round_prefer_floor", 0, (0.5, 0.5)),
    ("linear", "pytorch_half_pixel", "round_prefer_floor", 0, (0.6, 1.8)),
    ("linear", "half_pixel", "round_prefer_floor", 1, (0.4, 0.6)),
    ("cubic", "half_pixel", "round_prefer_floor", 0, (1.6, 2.2)),
    ("cubic", "align_corners", "round_prefer_floor", 0, (3.0, 2.0)),
    ("cubic", "half_pixel", "round_prefer_floor", 1, (0.5, 0.3)),
]


# align_corners cases use whole scales: for fractional scale * size the onnx reference (which
# rtd follows, for the node tests) and onnxruntime disagree on the output length used.
@pytest.mark.parametrize("mode,transform,nearest_mode,antialias,scales", RESIZE_CASES)
def test_resize_nchw_matches_onnxruntime(mode, transform, nearest_mode, antialias, scales):
    n, c, h, w = RNG.integers(1, 3), RNG.integers(1, 4), RNG.integers(5, 20), RNG.integers(5, 20)
    x = RNG.standard_normal((n, c, h, w)).astype(np.float32)
    scale_values = np.array([1.0, 1.0, *scales], np.float32)
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode=mode, coordinate_transformation_mode=transform,
                            nearest_mode=nearest_mode, antialias=antialias)
    scales_init = helper.make_tensor("scales", TensorProto.FLOAT, [4], scale_values)
    model = _model(node, [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], 19, [scales_init])
    (ours,), (theirs,) = _against_ort(model, {"x": x})
    assert ours.shape == theirs.shape
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [(1.5, 2.5), (0.6, 0.7), (2.0, 3.0)])
def test_resize_opset10_matches_onnxruntime(mode, scales):
    x = RNG.standard_normal((1, 2, 7, 9)).astype(np.float32)
    node = helper.make_node("Resize", ["x", "scales"], ["y"], mode=mode)
    scales_init = helper.make_tensor("scales", TensorProto.FLOAT, [4], [1.0, 1.0, *scales])
    model = _model(node, [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], 10, [scales_init])
    (ours,), (theirs,) = _against_ort(model, {"x": x})
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_resize_tf_half_pixel_for_nn_opset11_matches_onnxruntime():
    x = RNG.standard_normal((1, 2, 7, 9)).astype(np.float32)
    node = helper.make_node("Resize", ["x", "roi", "scales"], ["y"], mode="nearest",
                            coordinate_transformation_mode="tf_half_pixel_for_nn")
    inits = [helper.make_tensor("roi", TensorProto.FLOAT, [0], []),
             helper.make_tensor("scales", TensorProto.FLOAT, [4], [1.0, 1.0, 1.7, 0.6])]
    model = _model(node, [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], 11, inits)
    (ours,), (theirs,) = _against_ort(model, {"x": x})
    np.testing.assert_array_equal(ours, theirs)


def test_resize_sizes_keep_aspect_ratio_matches_onnxruntime():
    x = RNG.standard_normal((1, 3, 17, 23)).astype(np.float32)
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear", axes=[2, 3],
                            keep_aspect_ratio_policy="not_larger")
    sizes = helper.make_tensor("sizes", TensorProto.INT64, [2], [32, 32])
    model = _model(node, [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], 19, [sizes])
    (ours,), (theirs,) = _against_ort(model, {"x": x})
    assert ours.shape == theirs.shape == (1, 3, 24, 32)
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)


def test_gather_embedding_matches_onnxruntime():
    table = RNG.standard_normal((1000, 64)).astype(np.float32)
    ids = RNG.integers(-1000, 1000, (4, 37)).astype(np.int64)
    node = helper.make_node("Gather", ["table", "ids"], ["y"], axis=0)
    model = _model(node, [helper.make_tensor_value_info("table", TensorProto.FLOAT, None),
                          helper.make_tensor_value_info("ids", TensorProto.INT64, None)],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], 13)
    (ours,), (theirs,) = _against_ort(model, {"table": table, "ids": ids})
    np.testing.assert_array_equal(ours, theirs)


def test_shape_ops_return_views_and_expand_is_read_only():
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    (reshaped,) = _kernel("Reshape", 14).run(x, np.array([6, -1]))
    (transposed,) = _kernel("Transpose", 13, {"perm": [2, 0, 1]}).run(x)
    (unsqueezed,) = _kernel("Unsqueeze", 13).run(x, np.array([0, -1]))
    for view in (reshaped, transposed, unsqueezed):
        assert np.shares_memory(view, x)
    assert reshaped.shape == (6, 4) and unsqueezed.shape == (1, 2, 3, 4, 1)
    (expanded,) = _kernel("Expand", 13).run(x[:, :1], np.array([2, 3, 4]))
    assert expanded.shape == (2, 3, 4) and not expanded.flags.writeable


def test_random_ops_seeded_and_distributed():
    normal = _kernel("RandomNormal", 22, {"shape": [200_000], "mean": 2.0, "scale": 3.0, "seed": 1.5})
    (a,), (b,) = normal.run(), normal.run()
    np.testing.assert_array_equal(a, b)
    assert a.dtype == np.float32 and abs(a.mean() - 2.0) < 0.05 and abs(a.std() - 3.0) < 0.05
    (u,) = _kernel("RandomUniform", 22, {"shape": [100_000], "low": -1.0, "high": 3.0, "dtype": TensorProto.DOUBLE}).run()
    assert u.dtype == np.float64 and u.min() >= -1.0 and u.max() < 3.0 and abs(u.mean() - 1.0) < 0.05
    (like,) = _kernel("RandomNormalLike", 22).run(np.zeros((3, 5), np.float16))
    assert like.shape == (3, 5) and like.dtype == np.float16
    unseeded = _kernel("RandomNormal", 22, {"shape": [8]})
    assert not np.array_equal(unseeded.run()[0], unseeded.run()[0])


def test_multinomial_follows_the_logits():
    probs = np.array([[0.1, 0.6, 0.3], [0.8, 0.0, 0.2]])
    (samples,) = _kernel("Multinomial", 22, {"sample_size": 60_000, "seed": 3.0}).run(np.log(probs + 1e-30).astype(np.float32))
    assert samples.shape == (2, 60_000) and samples.dtype == np.int32
    for row, p in zip(samples, probs):
        np.testing.assert_allclose(np.bincount(row, minlength=3) / row.size, p, atol=0.01)


@pytest.mark.parametrize("op,opset,attrs,inputs,code", [
    ("Reshape", 14, {}, (np.zeros((2, 3)), np.array([4, -1])), Code.E_INPUT_INVALID),
    ("Gather", 13, {}, (np.zeros((5, 2)), np.array([5])), Code.E_INPUT_INVALID),
    ("Squeeze", 13, {}, (np.zeros((2, 3)), np.array([0])), Code.E_INPUT_INVALID),
    ("Range", 11, {}, (np.array(0), np.array(5), np.array(0)), Code.E_INPUT_INVALID),
    ("Split", 13, {}, (np.zeros(5), np.array([2, 2])), Code.E_INPUT_INVALID),
    ("SequenceAt", 11, {}, ([np.zeros(1)], np.array(3)), Code.E_INPUT_INVALID),
    ("OptionalGetElement", 18, {}, (None,), Code.E_INPUT_INVALID),
    ("ConstantOfShape", 21, {}, (np.array([2, -3]),), Code.E_INPUT_INVALID),
    ("Tile", 13, {}, (np.zeros((2, 2)), np.array([1, -1])), Code.E_INPUT_INVALID),
    ("GatherElements", 13, {}, (np.zeros((2, 2)), np.array([[0, 2]])), Code.E_INPUT_INVALID),
    ("ScatterND", 18, {}, (np.zeros(3), np.array([[3]]), np.ones(1)), Code.E_INPUT_INVALID),
])
def test_bad_inputs_refused_with_a_code(op, opset, attrs, inputs, code):
    with pytest.raises(RtdError) as err:
        _kernel(op, opset, attrs).run(*inputs)
    assert err.value.code is code


@pytest.mark.parametrize("op,opset,attrs,code", [
    ("Constant", 13, {"value_int": 1, "value_float": 2.0}, Code.E_MODEL_INVALID),
    ("Pad", 18, {"mode": "wrap"}, Code.E_OP_UNSUPPORTED),
    ("Resize", 19, {"mode": "bicubic"}, Code.E_OP_UNSUPPORTED),
    ("Resize", 13, {"coordinate_transformation_mode": "tf_half_pixel_for_nn"}, Code.E_OP_UNSUPPORTED),
    ("Resize", 18, {"coordinate_transformation_mode": "half_pixel_symmetric"}, Code.E_OP_UNSUPPORTED),
    ("ScatterND", 16, {"reduction": "max"}, Code.E_OP_UNSUPPORTED),
    ("Cast", 19, {"to": 999}, Code.E_OP_UNSUPPORTED),
    ("Transpose", 13, {"perm": [0, 1], "bogus": 1}, Code.E_OP_UNSUPPORTED),
    ("Transpose", 13, {"perm": [1, 1]}, Code.E_MODEL_INVALID),
])
def test_bad_attributes_refused_at_compile_time(op, opset, attrs, code):
    with pytest.raises(RtdError) as err:
        _kernel(op, opset, attrs)
    assert err.value.code is code


def test_resize_refuses_both_scales_and_sizes():
    x = np.zeros((1, 1, 4, 4), np.float32)
    with pytest.raises(RtdError) as err:
        _kernel("Resize", 13).run(x, None, np.ones(4, np.float32), np.array([1, 1, 8, 8]))
    assert err.value.code is Code.E_INPUT_INVALID


@settings(max_examples=150, deadline=None)
@given(in_size=st.integers(1, 24), factor=st.integers(1, 4), upsample=st.booleans(),
       mode=st.sampled_from(["nearest", "linear", "cubic"]),
       transform=st.sampled_from(["half_pixel", "pytorch_half_pixel", "asymmetric", "align_corners", "half_pixel_symmetric"]),
       nearest_mode=st.sampled_from(["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]),
       exclude_outside=st.booleans(), antialias=st.booleans())
def test_resize_periodic_path_equals_gather_path(in_size, factor, upsample, mode, transform, nearest_mode,
                                                 exclude_outside, antialias):
    """The strided-phase fast path computes what the generic per-tap gathers compute."""
    out_size = in_size * factor if upsample else max(in_size // factor, 1)
    scale = out_size / in_size
    index, weights, _, periodic = _resize.axis_plan(mode, transform, in_size, out_size, scale, None, nearest_mode,
                                                    -0.75, exclude_outside, antialias and mode != "nearest")
    x = RNG.standard_normal((2, 3, in_size)).astype(np.float32)
    gathered = _resize._along(np, x, 2, index, weights, None, np.float32)
    if periodic is not None:
        np.testing.assert_allclose(_resize._along(np, x, 2, index, weights, periodic, np.float32), gathered, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("starts, ends, axes", [([1, 0], [3, -1], [0, 2]), ([-2], [1000], None), ([0, 5], [2, 3], [1, -1])])
def test_slice_before_opset_10_takes_attributes_like_onnxruntime(starts, ends, axes):
    x = RNG.standard_normal((4, 5, 6)).astype(np.float32)
    attrs = {"starts": starts, "ends": ends, **({"axes": axes} if axes is not None else {})}
    node = helper.make_node("Slice", ["x"], ["y"], **attrs)
    model = _model(node, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], opset=9)
    ours, theirs = _against_ort(model, {"x": x})
    np.testing.assert_array_equal(ours[0], theirs[0])


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("reduction", ["add", "max"])
def test_scatter_elements_of_whole_slices_equals_onnxruntime_bit_for_bit(axis, reduction):
    """A graph network's scatter-add (an index per edge expanded over the features) runs slice by slice;
    the additions and their order are onnxruntime's, so the sums are its exactly, repeated targets too."""
    rng = np.random.default_rng(3)
    shape, edges = (6, 5, 7), 40
    index_shape = list(shape)
    index_shape[axis] = edges
    along = rng.integers(-shape[axis], shape[axis], edges)   # negative indices count from the end
    indices = np.broadcast_to(np.expand_dims(along, [a for a in range(3) if a != axis % 3]), index_shape).copy()
    data = rng.standard_normal(shape).astype(np.float32)
    updates = rng.standard_normal(index_shape).astype(np.float32)
    node = helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], axis=axis, reduction=reduction)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("d", TensorProto.FLOAT, shape),
                                            helper.make_tensor_value_info("i", TensorProto.INT64, index_shape),
                                            helper.make_tensor_value_info("u", TensorProto.FLOAT, index_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()
    feeds = {"d": data, "i": indices, "u": updates}
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_array_equal(compile_model(model).run(feeds)["y"], want)
