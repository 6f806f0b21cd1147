"""Constants the lowering makes or parses (kernels/constant.py): Conv+BatchNorm's folded weights, initializers
NumPy builds from float_data, folded values and a caller's vouched-for views are `frozen`, so the compiled
convolution keeps their packed panels and the plan runs the convolution natively."""
import mmap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from rtd.kernels import compile_model
from rtd.kernels.constant import frozen, read_only, vouch
from rtd.kernels.native import compiled
from tests.kernels.kernel_graphs import const, model, node


def conv_batchnorm(float_data: bool) -> onnx.ModelProto:
    """Conv -> BatchNormalization -> Relu -> Conv, the second weight given as float_data when asked."""
    rng = np.random.default_rng(0)
    f32 = np.float32
    w2 = rng.standard_normal((6, 8, 3, 3)).astype(f32)
    second = (helper.make_tensor("w2", TensorProto.FLOAT, w2.shape, w2.reshape(-1).tolist()) if float_data
              else const("w2", w2))
    nodes = [node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["bn"]),
             node("Relu", ["bn"], ["r"]), node("Conv", ["r", "w2"], ["y"], pads=[1, 1, 1, 1])]
    inits = [const("w", rng.standard_normal((8, 3, 3, 3)).astype(f32)), const("scale", rng.random(8).astype(f32) + 0.5),
             const("bias", rng.standard_normal(8).astype(f32)), const("mean", rng.standard_normal(8).astype(f32)),
             const("var", rng.random(8).astype(f32) + 0.5), second]
    return model(nodes, [("x", [1, 3, 12, 12])], [("y", None)], inits)


@pytest.mark.skipif(compiled is None, reason="the compiled kernels are not built")
@pytest.mark.parametrize("float_data", [False, True])
def test_folded_and_float_data_weights_run_natively_with_the_traced_bits(float_data):
    compiled_model = compile_model(conv_batchnorm(float_data))
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 3, 12, 12)).astype(np.float32)}
    traced, planned = (compiled_model.run(feeds)["y"].copy() for _ in range(2))
    (plan,) = compiled_model._plans.values()
    assert plan.stats()["native_nodes"] == len(plan.graph.nodes), plan.stats()   # both convolutions in the program
    assert np.array_equal(traced, planned)


def test_read_only_copies_only_what_could_still_change():
    base = np.arange(12, dtype=np.float32)
    view = base.reshape(3, 4)
    view.flags.writeable = False
    assert not frozen(view)                       # its owner is writable
    kept = read_only(view)
    assert frozen(kept) and not np.shares_memory(kept, base)
    parsed = np.frombuffer(b"\0" * 16, np.float32).reshape(2, 2)
    assert frozen(parsed) and read_only(parsed) is parsed


def test_a_vouched_for_view_of_a_read_only_mapping_is_frozen_without_a_copy():
    mapping = mmap.mmap(-1, 64)
    view = np.frombuffer(memoryview(mapping).toreadonly(), np.float32)
    assert not frozen(view)                       # a memoryview is no proof on its own
    vouch(view)
    assert frozen(view) and frozen(view[2:]) and read_only(view) is view
    with pytest.raises(ValueError):
        vouch(np.zeros(3))                        # a writable array cannot be vouched for


def test_the_loaders_weights_are_frozen_through_their_read_only_memoryview_and_a_gemm_keeps_them_uncopied(tmp_path):
    """The loader reads each weight into a read-only array of its own and hands it on as np.frombuffer of a read-only
    memoryview of it: frozen, so the lowering keeps it (and a Gemm's transB weight as its transposed view) without a
    copy; a read-only memoryview of an array that can still be written is no proof."""
    owned = np.arange(8, dtype=np.float32)
    owned.flags.writeable = False
    assert frozen(np.frombuffer(memoryview(owned), np.float32))
    writable = np.arange(8, dtype=np.float32)
    assert not frozen(np.frombuffer(memoryview(writable).toreadonly(), np.float32))
    rng = np.random.default_rng(3)
    weight = rng.standard_normal((6, 5)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(np.zeros(6, np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "gemm.onnx")
    compiled_model = compile_model(str(tmp_path / "gemm.onnx"), disable_passes=("pack_weights",))   # the lowering's view
    lowered = compiled_model.graph.constants["w__transposed"]
    assert frozen(lowered) and not lowered.flags.owndata and lowered.flags.f_contiguous   # a view of the loader's array
    x = rng.standard_normal((2, 5)).astype(np.float32)
    np.testing.assert_allclose(compiled_model.run({"x": x})["y"], x @ weight.T, rtol=1e-5, atol=1e-6)
