"""The compiled tree walk (kernels/native/forest.c) against onnxruntime: the same bits before the
post transform (onnxruntime's at one thread, where it sums in tree order), whatever rtd's thread count or the split (row blocks for many rows, trees in parallel
for a few); the NumPy walk it replaces agrees within float tolerance; the C checks its arguments."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest

from rtd.errors import RtdError
from rtd.kernels import compile_model, ir, native
from rtd.kernels.graph import make_kernel
from rtd.kernels.ops import _forest

from tests.kernels.test_ops_ml import F, ml_model, ml_node, random_trees, tree_features, vi

pytestmark = pytest.mark.skipif(native.compiled is None, reason="rtd was installed without its compiled kernels")


def regressor(n_trees, depth, n_features, targets, aggregate="SUM", modes=("BRANCH_LEQ",)):
    nodes, leaves = random_trees(n_trees, depth, n_features, modes, targets=targets, seed=n_trees + depth)
    node = ml_node("TreeEnsembleRegressor", ["X"], ["Y"], **nodes, n_targets=targets, aggregate_function=aggregate,
                   target_treeids=[t for t, _, _, _ in leaves], target_nodeids=[n for _, n, _, _ in leaves],
                   target_ids=[c for _, _, c, _ in leaves], target_weights=[w for _, _, _, w in leaves])
    return ml_model(node, [vi("X", F, [None, n_features])], [vi("Y")])


def kernel_of(model):
    graph = ir.from_onnx(onnx.load_from_string(model))
    return make_kernel(graph.nodes[0], graph.opsets)


@pytest.mark.parametrize("rows", [1, 3, 700])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("targets,aggregate,modes", [(1, "SUM", ("BRANCH_LEQ",)), (3, "SUM", ("BRANCH_LT", "BRANCH_GTE")),
                                                     (2, "AVERAGE", ("BRANCH_LEQ",)), (2, "MAX", ("BRANCH_EQ", "BRANCH_NEQ"))])
def test_compiled_walk_is_onnxruntimes_bits(rows, threads, targets, aggregate, modes, native_threads):
    model = regressor(300, 6, 9, targets, aggregate, modes)
    x = tree_features(rows, 9)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1   # onnxruntime's threads sum partial sums: its bits at 1 thread are the tree order's
    theirs = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    native_threads(threads)
    ours = compile_model(model).run({"X": x})["Y"]
    assert kernel_of(model).scorer is not None
    np.testing.assert_array_equal(ours, theirs)


def test_numpy_walk_agrees_with_the_compiled_one():
    model = regressor(40, 5, 6, 2, "SUM", ("BRANCH_LEQ", "BRANCH_GT"))
    kernel = kernel_of(model)
    x = tree_features(50, 6)
    numpy_scores = _forest.combined(kernel.forest, kernel.table, None, x, "SUM")
    np.testing.assert_allclose(kernel.scorer.scores(x, "SUM"), numpy_scores, rtol=1e-5, atol=1e-5)


def test_the_c_checks_its_arguments():
    scorer = kernel_of(regressor(5, 3, 4, 1)).scorer
    with pytest.raises(RtdError, match="features"):
        scorer.scores(np.zeros((2, 3), np.float32), "SUM")
    lib, ffi = native.compiled.lib, native.compiled.ffi
    x, out, has = np.zeros((2, 4), np.float32), np.zeros(2, np.float32), np.zeros(2, np.uint8)
    args = (ffi.from_buffer("float[]", x), x.size, 2, 4, 1, ffi.from_buffer("float[]", out), ffi.from_buffer("uint8_t[]", has))
    assert lib.rtd_forest_score_f32(scorer.handle, *args, 2) == 0
    assert lib.rtd_forest_score_f32(scorer.handle, *args, 3) < 0          # output length does not fit
    assert lib.rtd_forest_score_f32(scorer.handle, args[0], 7, *args[2:], 2) < 0   # input shorter than rows x columns
    status = ffi.new("int64_t *")
    one = np.zeros(1, np.int32)
    pointer = ffi.from_buffer("int32_t[]", one)
    assert lib.rtd_forest_new(1, ffi.from_buffer("int32_t[]", np.array([0], np.int32)), pointer,
                              ffi.from_buffer("int32_t[]", np.array([5], np.int32)), ffi.from_buffer("double[]", np.zeros(1)),
                              1, pointer, 1, 0, ffi.NULL, ffi.NULL, 1, 1, status) == ffi.NULL   # a successor past the nodes
    assert status[0] < 0


def test_every_batch_size_walks_the_tables_built_at_compile():
    """A tree ensemble's tables are built once (seconds for a large one): each new signature's plan uses
    the kernel compile made, not one of its own."""
    compiled = compile_model(regressor(50, 4, 5, 1))
    made = [kernel for node, kernel in compiled.runner.nodes if node.op_type == "TreeEnsembleRegressor"]
    for rows in (1, 7, 300):
        compiled.run({"X": tree_features(rows, 5)})
    plans = list(compiled._plans.values())
    assert len(made) == 1 and len(plans) == 3
    assert all(any(kernel is made[0] for kernel in plan.kernels) for plan in plans)
