"""Sibling products (kernels/lower/siblings.py): an unrolled recurrence's input projections, Gemms that share a
weight and read rows none of them computes, run as one product; the recurrent ones, each reading the step
before, and a product whose rows another one computes stay apart. Results as onnxruntime's and as the
unoptimised interpreter's; the plan's own op counts say what was batched."""
import numpy as np
import pytest
from onnx import TensorProto

from rtd.kernels import compile_model
from tests.kernels.kernel_graphs import node, typed_model
from tests.zoo.compare import reference_session

STEPS, WIDTH, HIDDEN = 5, 6, 4


def unrolled_recurrence() -> bytes:
    """h_t = tanh(x_t W + b + h_{t-1} R + c) over STEPS rows of x, then y1 = x_0 V + v, y2 = relu(y1) V + v (its
    rows computed by y1) and y3 = x_1 V + v (independent of both)."""
    rng = np.random.default_rng(3)
    weights = {"W": (WIDTH, HIDDEN), "b": (HIDDEN,), "R": (HIDDEN, HIDDEN), "c": (HIDDEN,), "V": (WIDTH, WIDTH), "v": (WIDTH,)}
    initializers = [(name, rng.standard_normal(shape).astype(np.float32)) for name, shape in weights.items()]
    initializers += [(f"t{t}", np.array([t], np.int64)) for t in range(STEPS)]
    nodes, h = [], "h0"
    for t in range(STEPS):
        nodes += [node("Gather", ["x", f"t{t}"], [f"x{t}"], axis=0),
                  node("Gemm", [f"x{t}", "W", "b"], [f"i{t}"]), node("Gemm", [h, "R", "c"], [f"r{t}"]),
                  node("Add", [f"i{t}", f"r{t}"], [f"s{t}"]), node("Tanh", [f"s{t}"], [f"h{t + 1}"])]
        h = f"h{t + 1}"
    nodes += [node("Gemm", ["x0", "V", "v"], ["y1"]), node("Relu", ["y1"], ["z"]), node("Gemm", ["z", "V", "v"], ["y2"]),
              node("Gemm", ["x1", "V", "v"], ["y3"])]
    return typed_model(nodes, [("x", TensorProto.FLOAT), ("h0", TensorProto.FLOAT)],
                       [(h, TensorProto.FLOAT), ("y2", TensorProto.FLOAT), ("y3", TensorProto.FLOAT)], initializers)


@pytest.fixture(scope="module")
def feeds():
    rng = np.random.default_rng(4)
    return {"x": rng.standard_normal((STEPS, WIDTH)).astype(np.float32),
            "h0": rng.standard_normal((1, HIDDEN)).astype(np.float32)}


def test_the_input_projections_run_as_one_product_and_the_recurrent_ones_apart(feeds):
    data = unrolled_recurrence()
    fast = compile_model(data)
    plain = compile_model(data, optimize=False)
    unbatched = compile_model(data, disable_passes=["batch_sibling_products"])
    want = reference_session(data, threads=1, optimized=False).run(None, feeds)
    for _ in range(2):   # the traced run, then the plan
        got = fast.run(feeds)
        for (name, value), expected in zip(got.items(), want):
            np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-5, err_msg=name)
            np.testing.assert_allclose(value, plain.run(feeds)[name], rtol=1e-5, atol=1e-5, err_msg=name)
    ops, before = fast.plan_stats(feeds)["ops"], unbatched.plan_stats(feeds)["ops"]
    # STEPS projections by W and two of the three V products (y1, y3) became two products;
    # the STEPS recurrent ones and y2 (its rows are relu(y1)) stay
    assert before["MatMulBias"] == 2 * STEPS + 3
    assert ops["MatMulBias"] == STEPS + 1 + 2
    assert ops["Concat"] == 2 and ops.get("Gather", 0) - before.get("Gather", 0) == STEPS + 2
