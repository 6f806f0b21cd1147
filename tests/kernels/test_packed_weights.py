"""Weights only products read (as their right-hand side) are kept as the GEMM's panels alone (kernels/lower/packing.py): the loader's
array is gone after the compile, every run computes what onnxruntime does from the panels, and a weight
anything else reads stays an array."""
import tracemalloc

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from rtd.kernels import compile_model
from rtd.kernels.native import compiled
from kernel_graphs import const, model, node

pytestmark = pytest.mark.skipif(compiled is None, reason="the compiled kernels are not built")


def _expected(onnx_model, feeds):
    session = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _linear(k: int, n: int, rows: list, seed: int = 0):
    """MatMul(x, w) + b then Relu, x of shape rows + [k]: one MatMulBias once lowered."""
    rng = np.random.default_rng(seed)
    nodes = [node("MatMul", ["x", "w"], ["m"]), node("Add", ["m", "b"], ["a"]), node("Relu", ["a"], ["y"])]
    inits = [const("w", (rng.standard_normal((k, n)) * 0.1).astype(np.float32)),
             const("b", rng.standard_normal(n).astype(np.float32))]
    return model(nodes, [("x", rows + [k])], [("y", None)], inits)


def test_a_products_weight_is_only_its_panels_and_both_runs_match_onnxruntime():
    onnx_model = _linear(40, 72, ["batch", 9])
    compiled_model = compile_model(onnx_model.SerializeToString())
    weights = {name: value for name, value in compiled_model.graph.constants.items() if value.ndim == 2}
    assert weights == {}   # no (40, 72) array left: the panels (1-D) stand in its place
    (product,) = [n for n in compiled_model.graph.nodes if n.op_type == "MatMulBias"]
    assert product.attrs["packed_shape"] == (40, 72) and compiled_model.graph.constants[product.inputs[1]].ndim == 1
    x = np.random.default_rng(1).standard_normal((3, 9, 40)).astype(np.float32)
    traced = compile_model(onnx_model.SerializeToString()).run({"x": x})["y"]   # a new signature: the traced run
    compiled_model.run({"x": x})   # traced: the next run is the plan's
    planned = compiled_model.run({"x": x})["y"]
    np.testing.assert_array_equal(traced, planned)
    np.testing.assert_allclose(planned, _expected(onnx_model, {"x": x})[0], rtol=1e-5, atol=1e-5)
    unpacked = compile_model(onnx_model.SerializeToString(), disable_passes=("pack_weights",))
    np.testing.assert_array_equal(unpacked.run({"x": x})["y"], planned)   # the same GEMM on the same panels


def test_a_product_without_a_bias_becomes_one_from_the_panels_and_a_weight_on_the_left_stays():
    """MatMul(x, w) with no Add after it (a bias-free projection, as in T5 or LLaMA layers) runs from the panels
    as a MatMulBias without a bias; MatMul(v, x), the constant on the left, is no product by a weight."""
    rng = np.random.default_rng(9)
    nodes = [node("MatMul", ["x", "w"], ["h"]), node("Tanh", ["h"], ["t"]), node("MatMul", ["v", "t"], ["y"])]
    inits = [const("w", (rng.standard_normal((20, 12)) * 0.3).astype(np.float32)),
             const("v", rng.standard_normal((5, 7)).astype(np.float32))]
    onnx_model = model(nodes, [("x", ["batch", 7, 20])], [("y", None)], inits)
    compiled_model = compile_model(onnx_model.SerializeToString())
    assert [n.op_type for n in compiled_model.graph.nodes if n.inputs[:1] == ["x"]] == ["MatMulBias"]
    assert "w" not in compiled_model.graph.constants and compiled_model.graph.constants["v"].shape == (5, 7)
    x = rng.standard_normal((3, 7, 20)).astype(np.float32)
    for _ in range(2):
        np.testing.assert_allclose(compiled_model.run({"x": x})["y"], _expected(onnx_model, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_no_rows_and_a_single_row_vector_run_from_the_panels():
    """A batch of none (an empty product) and a 1-D x (MatMul of a vector): shapes as onnxruntime's."""
    for rows, x_shape in ((["batch", 5], (0, 5, 16)), ([], (16,))):
        onnx_model = _linear(16, 24, rows, seed=2)
        compiled_model = compile_model(onnx_model.SerializeToString())
        assert any("packed_shape" in n.attrs for n in compiled_model.graph.nodes)
        x = np.random.default_rng(3).standard_normal(x_shape).astype(np.float32)
        want = _expected(onnx_model, {"x": x})[0]
        for _ in range(2):   # traced, then planned
            got = compiled_model.run({"x": x})["y"]
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_transposed_gemm_weight_shared_by_steps_is_packed_once_from_its_columns():
    rng = np.random.default_rng(4)
    nodes = [node("Gemm", ["x", "w", "c"], ["g0"], transB=1), node("Tanh", ["g0"], ["h0"]),
             node("Gemm", ["h0", "w", "c"], ["g1"], transB=1), node("Tanh", ["g1"], ["y"])]
    inits = [const("w", (rng.standard_normal((24, 24)) * 0.3).astype(np.float32)), const("c", rng.standard_normal(24).astype(np.float32))]
    onnx_model = model(nodes, [("x", ["batch", 24])], [("y", None)], inits)
    compiled_model = compile_model(onnx_model.SerializeToString())
    panels = [name for name in compiled_model.graph.constants if name.endswith("__panels")]
    assert panels == ["w__transposed__panels"]
    x = rng.standard_normal((5, 24)).astype(np.float32)
    for _ in range(2):
        np.testing.assert_allclose(compiled_model.run({"x": x})["y"], _expected(onnx_model, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_a_weight_something_else_reads_stays_an_array():
    """A tied embedding (the table a Gather reads is also the output product's transposed weight), a product's
    weight another node also reads, and one that is also a graph output: all three stay arrays (the tied
    product reads panels made from the table's transposed view, as its first run did before)."""
    rng = np.random.default_rng(6)
    table = (rng.standard_normal((30, 12)) * 0.2).astype(np.float32)
    nodes = [node("Gather", ["table", "ids"], ["e"]), node("Gemm", ["e", "table", "bias"], ["logits"], transB=1),
             node("MatMul", ["e", "w"], ["m"]), node("Add", ["m", "bias2"], ["z"]), node("Add", ["w", "wx"], ["wt"]),
             node("MatMul", ["e", "u"], ["mu"]), node("Add", ["mu", "bias2"], ["zu"])]
    inits = [const("table", table), const("bias", rng.standard_normal(30).astype(np.float32)),
             const("w", rng.standard_normal((12, 7)).astype(np.float32)), const("bias2", rng.standard_normal(7).astype(np.float32)),
             const("u", rng.standard_normal((12, 7)).astype(np.float32))]
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [4])
    outputs = ["logits", "z", "wt", "zu", "u"]
    onnx_model = model(nodes, [ids, ("wx", [12, 7])], [(name, None) for name in outputs], inits)
    compiled_model = compile_model(onnx_model.SerializeToString())
    constants = compiled_model.graph.constants
    assert (constants["table"].shape, constants["w"].shape, constants["u"].shape) == ((30, 12), (12, 7), (12, 7))
    assert {"table__panels", "w__panels", "u__panels"}.isdisjoint(constants)
    feeds = {"ids": np.array([3, 0, 29, 7], np.int64), "wx": rng.standard_normal((12, 7)).astype(np.float32)}
    for _ in range(2):
        got = compiled_model.run(feeds)
        for name, want in zip(outputs, _expected(onnx_model, feeds)):
            np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-5)


def test_the_loaders_array_is_freed_once_packed(tmp_path):
    """The weights read from a file: after the compile and a run, the process holds one form of a 16 MiB
    weight, the panels (it held the loader's array beside them)."""
    k = n = 2048
    onnx_model = _linear(k, n, ["batch"], seed=7)
    path = tmp_path / "linear.onnx"
    path.write_bytes(onnx_model.SerializeToString())
    x = np.random.default_rng(8).standard_normal((4, k)).astype(np.float32)
    for disable, most, least in (((), 1.0, 0.9), (("pack_weights",), 2.2, 1.9)):   # the second: what it was
        tracemalloc.start()
        try:
            compiled_model = compile_model(str(path), disable_passes=disable)
            compiled_model.run({"x": x})
            held = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert least * k * n * 4 < held < most * k * n * 4 + (1 << 20), (disable, held)
        del compiled_model
