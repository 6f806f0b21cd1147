"""Bernoulli and RandomUniformLike: the distribution drawn (means over many draws), seeds that
repeat a draw, the output types."""
import numpy as np
from onnx import TensorProto, helper


from rtd.kernels import compile_model

from kernel_graphs import typed_model


def one_node(node, elem_in, elem_out) -> bytes:
    return typed_model([node], [("x", elem_in)], [("y", elem_out)], opset=22)


def test_bernoulli_draws_one_with_probability_p():
    p = np.repeat(np.array([0.0, 0.1, 0.5, 0.9, 1.0], np.float32), 40000).reshape(5, -1)
    model = compile_model(one_node(helper.make_node("Bernoulli", ["x"], ["y"], dtype=TensorProto.INT32), TensorProto.FLOAT,
                                   TensorProto.INT32))
    (y,) = model.run({"x": p}).values()
    assert y.dtype == np.int32
    np.testing.assert_allclose(y.mean(axis=1), [0, 0.1, 0.5, 0.9, 1], atol=0.01)
    assert y[0].max() == 0 and y[4].min() == 1


def test_seeded_draws_repeat_and_unseeded_ones_do_not():
    x = np.full((64, 64), 0.5, np.float64)
    seeded = compile_model(one_node(helper.make_node("RandomUniformLike", ["x"], ["y"], low=-2.0, high=3.0, seed=7.0),
                                    TensorProto.DOUBLE, TensorProto.DOUBLE))
    a, b = seeded.run({"x": x})["y"], seeded.run({"x": x})["y"]
    np.testing.assert_array_equal(a, b)
    assert a.dtype == np.float64 and -2 <= a.min() and a.max() < 3 and abs(a.mean() - 0.5) < 0.1
    fresh = compile_model(one_node(helper.make_node("Bernoulli", ["x"], ["y"]), TensorProto.DOUBLE, TensorProto.DOUBLE))
    assert not np.array_equal(fresh.run({"x": x})["y"], fresh.run({"x": x})["y"])
