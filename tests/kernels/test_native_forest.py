"""The compiled tree walk (kernels/native/forest.c) against onnxruntime: the same bits before the
post transform (onnxruntime's at one thread, where it sums in tree order), whatever rtd's thread count or the split (row blocks for many rows, trees in parallel
for a few); the NumPy walk it replaces agrees within float tolerance; the compiled reading of the sums
(rtd_forest_predict_*) writes the NumPy reading's bits; the C checks its arguments."""
import itertools

import numpy as np
import onnx
from onnx import numpy_helper
import onnxruntime as ort
import pytest

from rtd.errors import RtdError
from rtd.kernels import compile_model, ir, native
from rtd.kernels.graph import make_kernel
from rtd.kernels.ops import _forest

from tests.kernels.test_ops_ml import ALL_MODES, D, F, I64, S, as_tree_ensemble_5, ml_model, ml_node, random_trees, tree_features, vi

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


def odd_features(n, f, seed):
    """Small integers, NaN and infinities: every branch way, and missing values."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, size=(n, f)).astype(np.float32)
    x[rng.random((n, f)) < 0.1] = np.nan
    x[rng.random((n, f)) < 0.05] = np.inf
    return x


def leaf_lists(prefix, leaves, scale=1.0, mixed=True, dtype=None):
    """Leaf attributes; `scale` 3e37 makes float32 sums overflow (infinite scores), `mixed` False keeps weights >= 0."""
    weights = [w * scale if mixed else abs(w) * scale for *_, w in leaves]
    lists = {f"{prefix}_treeids": [t for t, *_ in leaves], f"{prefix}_nodeids": [n for _, n, *_ in leaves],
             f"{prefix}_ids": [c for _, _, c, _ in leaves]}
    if dtype is None:
        return lists | {f"{prefix}_weights": weights}
    return lists | {f"{prefix}_weights_as_tensor": numpy_helper.from_array(np.array(weights, dtype))}


TRANSFORMS = ("NONE", "SOFTMAX", "SOFTMAX_ZERO", "LOGISTIC", "PROBIT")


def multiclass(transform, scale, every, base, strings, double):
    nodes, leaves = random_trees(6, 4, 5, ALL_MODES, targets=4, seed=every, every_target=every)
    if double:   # v3's double thresholds: compared and summed in float64
        nodes["nodes_values_as_tensor"] = numpy_helper.from_array(np.array(nodes.pop("nodes_values"), np.float64))
    labels = {"classlabels_strings": list("abcd")} if strings else {"classlabels_int64s": [5, 6, 7, 8]}
    node = ml_node("TreeEnsembleClassifier", ["X"], ["Y", "Z"], **nodes, **labels, post_transform=transform,
                   **({"base_values": [0.25, -0.5, 0.0, 1.5]} if base else {}),
                   **leaf_lists("class", leaves, scale, dtype=np.float64 if double else None))
    return ml_model(node, [vi("X", F, [None, 5])], [vi("Y", S if strings else I64), vi("Z")])


def binary(transform, scale, base, scored, mixed, labels):
    nodes, leaves = random_trees(5, 3, 5, ALL_MODES, targets=scored, seed=scored, every_target=scored == 1)
    named = {"classlabels_strings": labels} if isinstance(labels[0], str) else {"classlabels_int64s": labels}
    node = ml_node("TreeEnsembleClassifier", ["X"], ["Y", "Z"], **nodes, **named, post_transform=transform,
                   **({"base_values": base} if base else {}), **leaf_lists("class", leaves, scale, mixed))
    return ml_model(node, [vi("X", F, [None, 5])], [vi("Y", S if isinstance(labels[0], str) else I64), vi("Z")])


def regressor_of(transform, scale, aggregate, targets, base, double):
    nodes, leaves = random_trees(6, 4, 5, ALL_MODES, targets=targets, seed=targets)
    if double:
        nodes["nodes_values_as_tensor"] = numpy_helper.from_array(np.array(nodes.pop("nodes_values"), np.float64))
    node = ml_node("TreeEnsembleRegressor", ["X"], ["Y"], **nodes, n_targets=targets, aggregate_function=aggregate,
                   post_transform=transform, **({"base_values": [0.5 * i - 0.2 for i in range(targets)]} if base else {}),
                   **leaf_lists("target", leaves, scale, dtype=np.float64 if double else None))
    return ml_model(node, [vi("X", F, [None, 5])], [vi("Y")])


def tree_ensemble_5(transform, scale, aggregate, targets, elem):
    nodes, leaves = random_trees(5, 3, 5, ALL_MODES, targets=targets, seed=targets + 5)
    node = ml_node("TreeEnsemble", ["X"], ["Y"], **as_tree_ensemble_5(nodes, [(t, n, c, w * scale) for t, n, c, w in leaves]),
                   n_targets=targets, aggregate_function=aggregate, post_transform=transform)
    return ml_model(node, [vi("X", elem, [None, 5])], [vi("Y", elem)], ml_opset=5)


def reading_cases():
    scales = (1.0, 3e37)
    for transform, scale, every, base, strings in itertools.product(TRANSFORMS, scales, (True, False), (False, True), (False, True)):
        yield multiclass(transform, scale, every, base, strings, double=False), np.float32
    for transform, base in itertools.product(TRANSFORMS, (False, True)):
        yield multiclass(transform, 3e37, False, base, False, double=True), np.float32
    for transform, scale, base, scored, mixed, labels in itertools.product(   # 0.1: positive scores either side of 0.5
            TRANSFORMS, (0.1,) + scales, ([], [0.3], [0.1, 0.2]), (1, 2), (True, False), ([0, 1], [1], ["a", "b"])):
        if not (len(base) == 2 and (scored == 1 or labels == [1])):   # refused: kernels/ops/op_ml_tree_ensemble_classifier.py
            yield binary(transform, scale, base, scored, mixed, labels), np.float32
    for transform, scale, aggregate, targets, base in itertools.product(TRANSFORMS, scales, ("SUM", "AVERAGE", "MIN", "MAX"), (1, 3), (False, True)):
        yield regressor_of(transform, scale, aggregate, targets, base, double=scale == 1.0 and base), np.float32
    for transform, scale, aggregate, targets, elem in itertools.product(range(5), scales, range(4), (1, 3), (F, D)):
        yield tree_ensemble_5(transform, scale, aggregate, targets, elem), np.float64 if elem == D else np.float32


def bits(values):
    values = np.asarray(values)
    return values.astype(str) if values.dtype == object else values.view(np.uint8)


def test_the_compiled_reading_writes_the_numpy_readings_bits():
    """Every reading (regressor, TreeEnsemble-5, many classes with and without base values, the binary forms),
    each post transform, sums that overflow float32, NaN and infinite features: the same bits, labels and dtypes
    as the NumPy reading of the same compiled walk's sums (the op's code without its `reading`)."""
    checked = 0
    for model, dtype in reading_cases():
        kernel = kernel_of(model)
        assert kernel.reading is not None
        for rows in (1, 40):
            x = odd_features(rows, 5, rows + checked).astype(dtype)
            with np.errstate(all="ignore"):
                ours = kernel.compute(x)
                reading, kernel.reading = kernel.reading, None
                theirs = kernel.compute(x)
                kernel.reading = reading
            for a, b in zip(ours, theirs):
                assert a.dtype == b.dtype and a.shape == b.shape
                np.testing.assert_array_equal(bits(a), bits(b))
            checked += 1
    assert checked > 600


def test_the_c_reading_checks_its_arguments():
    lib, ffi = native.compiled.lib, native.compiled.ffi
    two = kernel_of(binary("NONE", 1.0, [0.3], 1, True, [0, 1])).scorer   # two targets
    x, scores, best, base = np.zeros((2, 5), np.float32), np.zeros(8, np.float32), np.zeros(2, np.int64), np.zeros(3)

    def predict(scorer, output, n_scores, n_best=2, n_base=0, x_len=10, rows=2, transform=0):
        return lib.rtd_forest_predict_f32(scorer.handle, ffi.from_buffer("float[]", x), x_len, rows, 5, 1, output,
                                          ffi.from_buffer("double[]", base) if n_base else ffi.NULL, n_base, 0.0, transform,
                                          ffi.from_buffer("float[]", scores), n_scores, ffi.from_buffer("int64_t[]", best), n_best)
    assert predict(two, _forest.BINARY_PAIR, 4) == 0
    assert predict(two, _forest.BINARY_PAIR, 4, n_base=2) == 0
    assert predict(two, _forest.BINARY_PAIR, 3) < 0            # scores shorter than rows x 2
    assert predict(two, _forest.BINARY_PROBIT, 4) < 0          # the probit form writes one a row
    assert predict(two, _forest.BINARY_PROBIT, 2) == 0
    assert predict(two, _forest.BINARY_SIGNED, 4, n_best=1) < 0   # a label a row
    assert predict(two, _forest.BINARY_SIGNED, 4, n_base=3) < 0   # at most two base values for two classes
    assert predict(two, _forest.TARGETS, 4, n_best=2) < 0      # targets have no best class
    assert predict(two, _forest.TARGETS, 4, n_best=0) == 0
    assert predict(two, _forest.CLASSES, 4, n_base=1) < 0      # a base value per class, or none
    assert predict(two, 6, 4) < 0 and predict(two, -1, 4) < 0  # no such reading
    assert predict(two, _forest.BINARY_PAIR, 4, transform=1) == 0
    assert predict(two, _forest.BINARY_PAIR, 4, transform=3) == 1   # zero scores: SOFTMAX_ZERO's 0.5 rows need care
    assert predict(two, _forest.BINARY_PAIR, 4, transform=4) < 0 and predict(two, _forest.BINARY_PAIR, 4, transform=-1) < 0
    assert predict(two, _forest.CLASSES, 4, x_len=9) < 0       # input shorter than rows x columns
    assert predict(two, _forest.CLASSES, 0, n_best=0, rows=0) == 0
    three = kernel_of(regressor_of("NONE", 1.0, "SUM", 3, False, False)).scorer
    assert predict(three, _forest.CLASSES, 6, n_base=3) == 0
    assert predict(three, _forest.BINARY_COMPLEMENT, 4) < 0    # the binary forms read two targets
