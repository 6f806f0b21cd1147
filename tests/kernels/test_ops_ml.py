"""The ai.onnx.ml kernels on small onnx.helper graphs over odd shapes, against onnxruntime and
(where it implements the op the same way) onnx's ReferenceEvaluator; refusals by their codes.

Where the two references disagree rtd follows onnxruntime, which sklearn-onnx's converters are
checked against: a single-column LinearClassifier writes [1 - s, s] (s untransformed unless
LOGISTIC or PROBIT); Normalizer
MAX divides by the row's largest value, not its largest magnitude; a NaN at a BRANCH_NEQ node
goes the true way (NaN != t) where the reference's v3 trees send every NaN the missing-value way;
the reference's TreeEnsemble ignores post_transform. Those cases compare with onnxruntime only.
"""
import itertools

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from rtd.errors import Code, RtdError
from rtd.kernels import compile_model
from rtd.kernels.ops import _forest, supported
from rtd.loader import onnx_guard

F, D, I64, S = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64, TensorProto.STRING
RNG = np.random.default_rng()


def vi(name, elem=F, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def ml_model(node, inputs, outputs, ml_opset=3) -> bytes:
    graph = helper.make_graph([node], "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17 if ml_opset < 5 else 21),
                                                    helper.make_opsetid("ai.onnx.ml", ml_opset)])
    model.ir_version = 8 if ml_opset < 5 else 10
    return model.SerializeToString()


def ml_node(op, inputs, outputs, **attrs):
    return helper.make_node(op, inputs, outputs, domain="ai.onnx.ml", **attrs)


def _same(ours, theirs, what):
    theirs = np.asarray(theirs)
    if theirs.dtype.kind in "OSU":
        assert [str(v) for v in np.asarray(ours).reshape(-1)] == [str(v) for v in theirs.reshape(-1)], what
        return
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype, f"{what}: {ours.dtype}{ours.shape} vs {theirs.dtype}{theirs.shape}"
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5, err_msg=what)


def agree(model: bytes, feeds: dict, reference: bool = True) -> list:
    """rtd's outputs, checked against onnxruntime and (if `reference`) onnx.reference."""
    ours = list(compile_model(model).run(feeds).values())
    theirs = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        _same(a, b, f"output {i} vs onnxruntime")
    if reference:
        for i, (a, b) in enumerate(zip(ours, ReferenceEvaluator(model).run(None, feeds))):
            _same(a, np.asarray(b).astype(a.dtype) if a.dtype != object else b, f"output {i} vs onnx.reference")
    return ours


def refusal(fn) -> RtdError:
    with pytest.raises(RtdError) as e:
        fn()
    return e.value


def rows(n, f, dtype=np.float32):
    return (RNG.standard_normal((n, f)) * 2).astype(dtype)


# ---- linear models, scalers, normalizers ----

@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("n", [1, 7])
def test_linear_classifier_multiclass(transform, n):
    coef = RNG.standard_normal(15).astype(np.float32).tolist()
    node = ml_node("LinearClassifier", ["X"], ["Y", "Z"], coefficients=coef, intercepts=[0.5, -1.0, 0.25],
                   classlabels_ints=[4, 9, 2], post_transform=transform)
    agree(ml_model(node, [vi("X", F, [None, 5])], [vi("Y", I64), vi("Z")]), {"X": rows(n, 5)})


@pytest.mark.parametrize("elem,dtype", [(D, np.float64), (I64, np.int64)])
def test_linear_classifier_string_labels_and_non_float_inputs(elem, dtype):
    node = ml_node("LinearClassifier", ["X"], ["Y", "Z"], coefficients=[1.0, -2.0, 0.5, 3.0, 0.0, -1.0],
                   intercepts=[0.0, 0.1, -0.1], classlabels_strings=["a", "bb", "c"], post_transform="SOFTMAX")
    agree(ml_model(node, [vi("X", elem, [None, 2])], [vi("Y", S), vi("Z")]), {"X": rows(6, 2).astype(dtype)})


@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "SOFTMAX"])
def test_linear_classifier_one_score_column_follows_onnxruntime(transform):
    node = ml_node("LinearClassifier", ["X"], ["Y", "Z"], coefficients=[1.0, -2.0, 0.5], intercepts=[0.1],
                   classlabels_ints=[3, 7], post_transform=transform)
    agree(ml_model(node, [vi("X", F, [None, 3])], [vi("Y", I64), vi("Z")]), {"X": rows(9, 3)}, reference=False)


def test_linear_regressor_targets():
    node = ml_node("LinearRegressor", ["X"], ["Y"], coefficients=RNG.standard_normal(6).tolist(),
                   intercepts=[1.0, -2.0], targets=2)
    agree(ml_model(node, [vi("X", F, [None, 3])], [vi("Y")]), {"X": rows(11, 3)})


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
def test_normalizer(norm):
    x = rows(5, 4)
    x[2] = 0  # a zero row is left as it is
    node = ml_node("Normalizer", ["X"], ["Y"], norm=norm)
    agree(ml_model(node, [vi("X", F, [None, 4])], [vi("Y")]), {"X": x}, reference=norm != "MAX")


@pytest.mark.parametrize("offset,scale", [([1.0, -2.0, 0.5], [2.0, 0.5, -1.0]), ([0.25], [3.0])])
def test_scaler(offset, scale):
    node = ml_node("Scaler", ["X"], ["Y"], offset=offset, scale=scale)
    agree(ml_model(node, [vi("X", D, [None, 3])], [vi("Y")]), {"X": rows(7, 3, np.float64)}, reference=False)
    agree(ml_model(node, [vi("X", F, [None, 3])], [vi("Y")]), {"X": rows(7, 3)})


def test_binarizer_imputer_and_array_feature_extractor():
    x = rows(6, 5)
    x[1, 2] = x[4, 0] = np.nan
    binarizer = ml_model(ml_node("Binarizer", ["X"], ["Y"], threshold=0.3), [vi("X", F, [None, 5])], [vi("Y")])
    agree(binarizer, {"X": rows(6, 5)})  # onnxruntime refuses NaN here
    imputer = ml_node("Imputer", ["X"], ["Y"], imputed_value_floats=[9.0, 8.0, 7.0, 6.0, 5.0],
                      replaced_value_float=float("nan"))
    agree(ml_model(imputer, [vi("X", F, [None, 5])], [vi("Y")]), {"X": x})
    ints = RNG.integers(-2, 3, size=(4, 3))
    imputer = ml_node("Imputer", ["X"], ["Y"], imputed_value_int64s=[100], replaced_value_int64=0)
    agree(ml_model(imputer, [vi("X", I64, [None, 3])], [vi("Y", I64)]), {"X": ints})
    extractor = ml_node("ArrayFeatureExtractor", ["X", "I"], ["Y"])
    words = np.array([["a", "b", "c"], ["d", "e", "f"]], dtype=object)
    agree(ml_model(extractor, [vi("X", S, [None, 3]), vi("I", I64, [None])], [vi("Y", S)]),
          {"X": words, "I": np.array([2, 0, 2], np.int64)})
    agree(ml_model(extractor, [vi("X", F, [None, 5]), vi("I", I64, [None])], [vi("Y")]),
          {"X": x, "I": np.array([4, 1], np.int64)})


def test_feature_vectorizer_cuts_and_pads_to_declared_widths():
    node = ml_node("FeatureVectorizer", ["A", "B", "C"], ["Y"], inputdimensions=[2, 3, 1])
    model = ml_model(node, [vi("A", F, [None, 3]), vi("B", F, [None, 2]), vi("C", F, [None, 1])], [vi("Y")])
    agree(model, {"A": rows(4, 3), "B": rows(4, 2), "C": rows(4, 1)}, reference=False)


# ---- encoders over strings and integers ----

def test_one_hot_encoder_strings_and_ints():
    node = ml_node("OneHotEncoder", ["X"], ["Y"], cats_strings=["red", "green", "blue"], zeros=1)
    x = np.array([["red", "blue"], ["mauve", "green"], ["green", "green"]], dtype=object)
    agree(ml_model(node, [vi("X", S, [None, 2])], [vi("Y")]), {"X": x})
    node = ml_node("OneHotEncoder", ["X"], ["Y"], cats_int64s=[3, 1, 4, 5], zeros=1)
    agree(ml_model(node, [vi("X", I64, [None, 3])], [vi("Y")]), {"X": RNG.integers(0, 6, size=(5, 3))})


def test_one_hot_encoder_without_zeros_refuses_an_unknown_category():
    node = ml_node("OneHotEncoder", ["X"], ["Y"], cats_strings=["red", "green"], zeros=0)
    model = compile_model(ml_model(node, [vi("X", S, [None])], [vi("Y")]))
    assert model.run({"X": np.array([b"green", b"red"], dtype=object)})["Y"].tolist() == [[0, 1], [1, 0]]
    assert refusal(lambda: model.run({"X": np.array(["blue"], dtype=object)})).code is Code.E_INPUT_INVALID


@pytest.mark.parametrize("keys,values,elem_in,elem_out,x", [
    ({"keys_strings": ["a", "b", "c"]}, {"values_int64s": [7, 8, 9]}, S, I64, np.array(["c", "zz", "a", "b"], object)),
    ({"keys_int64s": [1, 5, -3]}, {"values_strings": ["one", "five", "minus"]}, I64, S, np.array([[5, 2], [-3, 1]])),
    ({"keys_floats": [0.5, 1.5]}, {"values_floats": [-1.0, 2.0]}, F, F, np.array([1.5, 0.5, 3.0], np.float32)),
])
def test_label_encoder_2(keys, values, elem_in, elem_out, x):
    node = ml_node("LabelEncoder", ["X"], ["Y"], **keys, **values)
    agree(ml_model(node, [vi("X", elem_in, None)], [vi("Y", elem_out)], ml_opset=2), {"X": x})


def test_label_encoder_4_tensors():
    node = ml_node("LabelEncoder", ["X"], ["Y"], keys_tensor=numpy_helper.from_array(np.array([2, 4, 6], np.int64)),
                   values_tensor=helper.make_tensor("v", S, [3], [b"two", b"four", b"six"]),
                   default_tensor=helper.make_tensor("d", S, [1], [b"none"]))
    agree(ml_model(node, [vi("X", I64, None)], [vi("Y", S)], ml_opset=4), {"X": np.array([[6, 1, 2]], np.int64)})


def test_category_mapper_both_ways():
    node = ml_node("CategoryMapper", ["X"], ["Y"], cats_strings=["x", "y"], cats_int64s=[10, 20], default_int64=-5)
    agree(ml_model(node, [vi("X", S, None)], [vi("Y", I64)]), {"X": np.array(["y", "q", "x"], object)}, reference=False)
    node = ml_node("CategoryMapper", ["X"], ["Y"], cats_strings=["x", "y"], cats_int64s=[10, 20], default_string="?")
    agree(ml_model(node, [vi("X", I64, None)], [vi("Y", S)]), {"X": np.array([20, 3, 10], np.int64)}, reference=False)


def test_zip_map_serves_the_probability_tensor():
    node = ml_node("ZipMap", ["X"], ["Z"], classlabels_strings=["p", "q", "r"])
    out = helper.make_value_info("Z", helper.make_sequence_type_proto(helper.make_map_type_proto(S, helper.make_tensor_type_proto(F, []))))
    model = compile_model(ml_model(node, [vi("X", F, [None, 3])], [out]))
    assert model.outputs[0].dtype == np.float32 and model.outputs[0].shape == (None, 3)
    x = rows(4, 3)
    np.testing.assert_array_equal(model.run({"X": x})["Z"], x)
    assert refusal(lambda: model.run({"X": rows(4, 2)})).code is Code.E_INPUT_INVALID


# ---- tree ensembles ----

def random_trees(n_trees, depth, n_features, modes=("BRANCH_LEQ",), targets=1, seed=None, every_target=False):
    """v1/v3 node lists of random trees over small-integer features (so EQ/NEQ branches are taken),
    and leaf weights [(tree, node, target, weight)]: for some targets of each leaf, or all."""
    rng = np.random.default_rng(seed)
    nodes = {k: [] for k in ("treeids", "nodeids", "modes", "featureids", "values", "truenodeids", "falsenodeids",
                             "missing_value_tracks_true")}
    leaves = []
    def grow(level, tree, ids):
        nid = next(ids)
        row = len(nodes["nodeids"])
        for key in nodes:
            nodes[key].append(0)
        nodes["treeids"][row], nodes["nodeids"][row] = tree, nid
        if level == depth or (level and rng.random() < 0.25):
            nodes["modes"][row] = "LEAF"
            some = targets if every_target else rng.integers(1, targets + 1)
            for target in sorted(rng.choice(targets, size=some, replace=False)):
                leaves.append((tree, nid, int(target), float(np.float32(rng.normal()))))
            return nid
        nodes["modes"][row] = str(rng.choice(modes))
        nodes["featureids"][row] = int(rng.integers(n_features))
        nodes["values"][row] = float(rng.integers(-2, 3)) + (0.0 if rng.random() < 0.5 else 0.5)
        nodes["missing_value_tracks_true"][row] = int(rng.random() < 0.5)
        nodes["truenodeids"][row] = grow(level + 1, tree, ids)
        nodes["falsenodeids"][row] = grow(level + 1, tree, ids)
        return nid

    for tree in range(n_trees):
        grow(0, tree * 3 + 1, itertools.count())
    return {f"nodes_{k}": v for k, v in nodes.items()}, leaves


def tree_features(n, f):
    x = RNG.integers(-3, 4, size=(n, f)).astype(np.float32)
    x[RNG.random((n, f)) < 0.1] = np.nan
    return x


ALL_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("modes", [("BRANCH_LEQ",), ALL_MODES])
def test_tree_ensemble_regressor(aggregate, modes):
    """With every mode some leaves score one target only: such a target is 0 for a sample whose
    leaves never score it (onnxruntime; the reference gives its base value)."""
    nodes, leaves = random_trees(5, 4, 6, modes, targets=2, every_target=len(modes) == 1)
    node = ml_node("TreeEnsembleRegressor", ["X"], ["Y"], **nodes, n_targets=2, aggregate_function=aggregate,
                   target_treeids=[t for t, _, _, _ in leaves], target_nodeids=[n for _, n, _, _ in leaves],
                   target_ids=[c for _, _, c, _ in leaves], target_weights=[w for _, _, _, w in leaves],
                   base_values=[0.5, -0.25])
    agree(ml_model(node, [vi("X", F, [None, 6])], [vi("Y")]), {"X": tree_features(23, 6)},
          reference=aggregate in ("SUM", "AVERAGE") and "BRANCH_NEQ" not in modes)


@pytest.mark.parametrize("transform", ["NONE", "SOFTMAX", "LOGISTIC"])
@pytest.mark.parametrize("labels", [{"classlabels_int64s": [5, 6, 7]}, {"classlabels_strings": ["x", "y", "z"]}])
@pytest.mark.parametrize("every_class", [True, False])
def test_tree_ensemble_classifier_multiclass(transform, labels, every_class):
    """When some leaves score only some classes, the label is the best scored class (onnxruntime;
    the reference takes the best of all columns), so that case compares with onnxruntime only."""
    modes = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ")
    nodes, leaves = random_trees(4, 3, 5, modes, targets=3, every_target=every_class)
    node = ml_node("TreeEnsembleClassifier", ["X"], ["Y", "Z"], **nodes, **labels, post_transform=transform,
                   class_treeids=[t for t, _, _, _ in leaves], class_nodeids=[n for _, n, _, _ in leaves],
                   class_ids=[c for _, _, c, _ in leaves], class_weights=[w for _, _, _, w in leaves])
    label_type = S if "classlabels_strings" in labels else I64
    agree(ml_model(node, [vi("X", F, [None, 5])], [vi("Y", label_type), vi("Z")]), {"X": tree_features(17, 5)},
          reference=every_class)


@pytest.mark.parametrize("transform,base,scored", [("LOGISTIC", [0.3], 1), ("NONE", [], 1), ("LOGISTIC", [], 1),
                                                   ("NONE", [], 2), ("SOFTMAX", [0.1, 0.2], 2), ("NONE", [0.4], 2)])
def test_tree_ensemble_classifier_binary_follows_onnxruntime(transform, base, scored):
    """Two classes, leaves scoring the first only (as gradient boosting's) or both (as forests')."""
    nodes, leaves = random_trees(3, 3, 4, targets=scored, every_target=True)
    node = ml_node("TreeEnsembleClassifier", ["X"], ["Y", "Z"], **nodes, classlabels_int64s=[0, 1],
                   post_transform=transform, **({"base_values": base} if base else {}), class_treeids=[t for t, _, _, _ in leaves],
                   class_nodeids=[n for _, n, _, _ in leaves], class_ids=[c for _, _, c, _ in leaves],
                   class_weights=[w for _, _, _, w in leaves])
    agree(ml_model(node, [vi("X", F, [None, 4])], [vi("Y", I64), vi("Z")]), {"X": tree_features(19, 4)}, reference=False)


@pytest.mark.parametrize("elem,dtype", [(F, np.float32), (D, np.float64)])
def test_tree_ensemble_v3_tensor_attributes(elem, dtype):
    nodes, leaves = random_trees(3, 3, 4, targets=1)
    values = nodes.pop("nodes_values")
    node = ml_node("TreeEnsembleRegressor", ["X"], ["Y"], **nodes, n_targets=1,
                   nodes_values_as_tensor=numpy_helper.from_array(np.array(values, dtype)),
                   target_treeids=[t for t, _, _, _ in leaves], target_nodeids=[n for _, n, _, _ in leaves],
                   target_ids=[c for _, _, c, _ in leaves],
                   target_weights_as_tensor=numpy_helper.from_array(np.array([w for *_, w in leaves], dtype)))
    agree(ml_model(node, [vi("X", elem, [None, 4])], [vi("Y")]), {"X": tree_features(9, 4).astype(dtype)}, reference=False)


def as_tree_ensemble_5(nodes, leaves, members: int = 0):
    """The same trees in TreeEnsemble-5's form: branch and leaf lists apart, modes as numbers;
    the first `members` branches become set-membership tests."""
    branch = [i for i, m in enumerate(nodes["nodes_modes"]) if m != "LEAF"]
    leaf = {(t, n): k for k, (t, n, _, _) in enumerate(leaves)}
    at = {(nodes["nodes_treeids"][i], nodes["nodes_nodeids"][i]): k for k, i in enumerate(branch)}
    code = {m: k for k, m in enumerate(ALL_MODES)}
    attrs = {k: [] for k in ("nodes_featureids", "nodes_modes", "nodes_truenodeids", "nodes_trueleafs",
                             "nodes_falsenodeids", "nodes_falseleafs", "nodes_missing_value_tracks_true")}
    splits, membership = [], []
    for k, i in enumerate(branch):
        tree = nodes["nodes_treeids"][i]
        attrs["nodes_featureids"].append(nodes["nodes_featureids"][i])
        attrs["nodes_missing_value_tracks_true"].append(nodes["nodes_missing_value_tracks_true"][i])
        attrs["nodes_modes"].append(6 if k < members else code[nodes["nodes_modes"][i]])
        if k < members:
            # no 0.0 member: the reference ends a set at the first falsy value
            membership += [float(v) for v in RNG.choice([-2, -1, 1, 2], size=2, replace=False)] + [np.nan]
        splits.append(nodes["nodes_values"][i])
        for side in ("true", "false"):
            target = (tree, nodes[f"nodes_{side}nodeids"][i])
            attrs[f"nodes_{side}leafs"].append(int(target in leaf))
            attrs[f"nodes_{side}nodeids"].append(leaf[target] if target in leaf else at[target])
    roots = sorted({nodes["nodes_treeids"][i] for i in branch})
    attrs["nodes_modes"] = numpy_helper.from_array(np.array(attrs["nodes_modes"], np.uint8))
    return dict(attrs, nodes_splits=numpy_helper.from_array(np.array(splits, np.float32)),
                tree_roots=[min(at[t, n] for (t, n) in at if t == r) for r in roots],
                leaf_targetids=[c for _, _, c, _ in leaves],
                leaf_weights=numpy_helper.from_array(np.array([w for *_, w in leaves], np.float32)),
                **({"membership_values": numpy_helper.from_array(np.array(membership, np.float32))} if members else {}))


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
@pytest.mark.parametrize("members", [0, 3])
def test_tree_ensemble_5(aggregate, members):
    nodes, leaves = random_trees(4, 3, 5, ALL_MODES, targets=1)
    for k, m in enumerate(nodes["nodes_modes"]):
        if m == "LEAF":
            nodes["nodes_modes"][k] = m
    node = ml_node("TreeEnsemble", ["X"], ["Y"], **as_tree_ensemble_5(nodes, leaves, members), n_targets=1,
                   aggregate_function=aggregate)
    agree(ml_model(node, [vi("X", F, [None, 5])], [vi("Y")], ml_opset=5), {"X": tree_features(21, 5)},
          reference=aggregate in (0, 1))


@pytest.mark.parametrize("block", [_forest.BLOCK, 64])
def test_tree_walk_is_one_step_per_level_for_a_large_batch(block, monkeypatch):
    """Vectorised: 20 000 samples through 50 trees of depth 8 well within the test's time,
    walked at once or in blocks of samples."""
    monkeypatch.setattr(_forest, "BLOCK", block)
    nodes, leaves = random_trees(50, 8, 10, targets=1, seed=3)
    node = ml_node("TreeEnsembleRegressor", ["X"], ["Y"], **nodes, n_targets=1,
                   target_treeids=[t for t, _, _, _ in leaves], target_nodeids=[n for _, n, _, _ in leaves],
                   target_ids=[c for _, _, c, _ in leaves], target_weights=[w for _, _, _, w in leaves])
    model = ml_model(node, [vi("X", F, [None, 10])], [vi("Y")])
    x = tree_features(20000, 10)
    ours = compile_model(model).run({"X": x})["Y"]
    theirs = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


# ---- support vector machines ----

@pytest.mark.parametrize("kernel", ["LINEAR", "POLY", "RBF", "SIGMOID"])
def test_svm_regressor(kernel):
    node = ml_node("SVMRegressor", ["X"], ["Y"], kernel_type=kernel, kernel_params=[0.3, 0.5, 3.0], n_supports=4,
                   support_vectors=RNG.standard_normal(12).tolist(), coefficients=RNG.standard_normal(4).tolist(),
                   rho=[0.7])
    agree(ml_model(node, [vi("X", F, [None, 3])], [vi("Y")]), {"X": rows(8, 3)})


@pytest.mark.parametrize("kernel", ["LINEAR", "RBF"])
@pytest.mark.parametrize("counts", [[2, 3, 1], [3, 2]])
def test_svm_classifier_votes(kernel, counts):
    k, n = len(counts), sum(counts)
    node = ml_node("SVMClassifier", ["X"], ["Y", "Z"], kernel_type=kernel, kernel_params=[0.2, 0.0, 3.0],
                   vectors_per_class=counts, support_vectors=RNG.standard_normal(n * 4).tolist(),
                   coefficients=[-1.0, *RNG.standard_normal((k - 1) * n - 1)], rho=[0.1, -0.2, 0.3][:k * (k - 1) // 2],
                   classlabels_ints=[1, 2, 3][:k])
    agree(ml_model(node, [vi("X", F, [None, 4])], [vi("Y", I64), vi("Z")]), {"X": rows(13, 4)})


@pytest.mark.parametrize("signs", ["positive", "mixed"])
def test_binary_svm_classifiers_label_as_onnxruntime(signs):
    """Two classes: a support-vector model labels by its vote whatever its coefficients' signs; a
    linear one by onnxruntime's rule on its top score (0.5 when every coefficient is >= 0, else 0).
    onnx.reference applies the 0.5 rule to a support-vector model's votes too: onnxruntime only here
    (test_svm_classifier_votes keeps a negative coefficient, where the two agree)."""
    coefficients = np.abs(RNG.standard_normal(10)) if signs == "positive" else RNG.standard_normal(10)
    svc = ml_node("SVMClassifier", ["X"], ["Y", "Z"], kernel_type="LINEAR", kernel_params=[0.2, 0.0, 3.0],
                  vectors_per_class=[6, 4], support_vectors=RNG.standard_normal(40).tolist(),
                  coefficients=coefficients.tolist(), rho=[0.1], classlabels_ints=[1, 2])
    agree(ml_model(svc, [vi("X", F, [None, 4])], [vi("Y", I64), vi("Z")]), {"X": rows(64, 4)}, reference=False)
    linear = ml_node("SVMClassifier", ["X"], ["Y", "Z"], kernel_type="LINEAR", kernel_params=[0.0, 0.0, 1.0],
                     coefficients=coefficients[:8].tolist(), rho=[-0.3], classlabels_ints=[1, 2])
    agree(ml_model(linear, [vi("X", F, [None, 4])], [vi("Y", I64), vi("Z")]), {"X": rows(64, 4) * 0.3}, reference=False)


def test_svm_classifier_linear_without_support_vectors():
    """onnxruntime only: the reference cannot run string labels on a linear SVMClassifier."""
    node = ml_node("SVMClassifier", ["X"], ["Y", "Z"], coefficients=RNG.standard_normal(3 * 4).tolist(), rho=[0.25],
                   kernel_type="LINEAR", kernel_params=[0.0, 0.0, 1.0],
                   classlabels_strings=["a", "b", "c"])
    agree(ml_model(node, [vi("X", F, [None, 4])], [vi("Y", S), vi("Z")]), {"X": rows(6, 4)}, reference=False)


# ---- refusals, at load where the model is at fault ----

def _refused_at_compile(node, inputs, outputs, code):
    error = refusal(lambda: compile_model(ml_model(node, inputs, outputs)))
    assert error.code is code, error
    assert node.op_type in error.detail
    return error


def test_bad_attributes_refuse_at_compile_naming_op_and_attribute():
    e = _refused_at_compile(ml_node("LinearRegressor", ["X"], ["Y"], coefficients=[1.0], post_transform="CUBE"),
                            [vi("X", F, [None, 1])], [vi("Y")], Code.E_OP_UNSUPPORTED)
    assert "post_transform" in e.detail
    _refused_at_compile(ml_node("Normalizer", ["X"], ["Y"], norm="L3"), [vi("X", F, [None, 1])], [vi("Y")],
                        Code.E_OP_UNSUPPORTED)
    _refused_at_compile(ml_node("LinearClassifier", ["X"], ["Y", "Z"], coefficients=[1.0, 2.0]),
                        [vi("X", F, [None, 1])], [vi("Y", I64), vi("Z")], Code.E_MODEL_INVALID)
    _refused_at_compile(ml_node("SVMRegressor", ["X"], ["Y"], kernel_type="CHI2", n_supports=1, support_vectors=[1.0],
                                coefficients=[1.0], rho=[0.0]), [vi("X", F, [None, 1])], [vi("Y")], Code.E_OP_UNSUPPORTED)


def _tree(**changes):
    nodes = {"nodes_treeids": [0, 0, 0], "nodes_nodeids": [0, 1, 2], "nodes_modes": ["BRANCH_LEQ", "LEAF", "LEAF"],
             "nodes_featureids": [0, 0, 0], "nodes_values": [0.5, 0.0, 0.0], "nodes_truenodeids": [1, 0, 0],
             "nodes_falsenodeids": [2, 0, 0], "target_treeids": [0, 0], "target_nodeids": [1, 2], "target_ids": [0, 0],
             "target_weights": [1.0, 2.0], "n_targets": 1}
    nodes.update(changes)
    return ml_node("TreeEnsembleRegressor", ["X"], ["Y"], **nodes)


@pytest.mark.parametrize("changes,code,words", [
    ({"nodes_modes": ["BRANCH_LEQ", "BRANCH_LEQ", "LEAF"], "nodes_truenodeids": [1, 0, 0]}, Code.E_MODEL_INVALID, "cycle"),
    ({"nodes_falsenodeids": [7, 0, 0]}, Code.E_MODEL_INVALID, "does not exist"),
    ({"nodes_values": [0.5, 0.0]}, Code.E_MODEL_INVALID, "length"),
    ({"nodes_modes": ["BRANCH_SOMETIMES", "LEAF", "LEAF"]}, Code.E_OP_UNSUPPORTED, "BRANCH_SOMETIMES"),
    ({"target_ids": [0, 3]}, Code.E_MODEL_INVALID, "target"),
    ({"target_nodeids": [1, 9]}, Code.E_MODEL_INVALID, "does not exist"),
    ({"aggregate_function": "MEDIAN"}, Code.E_OP_UNSUPPORTED, "aggregate_function"),
])
def test_malformed_trees_refuse_at_compile(changes, code, words):
    e = _refused_at_compile(_tree(**changes), [vi("X", F, [None, 1])], [vi("Y")], code)
    assert words in e.detail


def test_bad_inputs_are_refused_with_a_code_not_a_traceback():
    nodes = _tree(nodes_featureids=[3, 0, 0])
    model = compile_model(ml_model(nodes, [vi("X", F, [None, None])], [vi("Y")]))
    assert refusal(lambda: model.run({"X": rows(2, 2)})).code is Code.E_INPUT_INVALID
    node = ml_node("LabelEncoder", ["X"], ["Y"], keys_strings=["a"], values_int64s=[1])
    model = compile_model(ml_model(node, [vi("X", S, None)], [vi("Y", I64)], ml_opset=2))
    assert refusal(lambda: model.run({"X": np.array([b"\xff\xfe"], object)})).code is Code.E_INPUT_INVALID
    extractor = ml_node("ArrayFeatureExtractor", ["X", "I"], ["Y"])
    model = compile_model(ml_model(extractor, [vi("X", F, [None, 3]), vi("I", I64, [None])], [vi("Y")]))
    assert refusal(lambda: model.run({"X": rows(2, 3), "I": np.array([3], np.int64)})).code is Code.E_INPUT_INVALID


def test_the_workers_guard_allows_the_ml_ops_rtd_serves_and_nothing_else_of_that_domain():
    allowed = set(supported())
    node = ml_node("Scaler", ["X"], ["Y"], offset=[0.0], scale=[2.0])
    onnx_guard.check_model(ml_model(node, [vi("X", F, [None, 2])], [vi("Y")]), allowed_ops=allowed)
    node = ml_node("DictVectorizer", ["X"], ["Y"], string_vocabulary=["a"])
    e = refusal(lambda: onnx_guard.check_model(ml_model(node, [vi("X", F, None)], [vi("Y")]), allowed_ops=allowed))
    assert e.code is Code.E_ONNX_OP_FORBIDDEN and "DictVectorizer" in e.detail


def test_tree_ensemble_node_ids_dense_or_spread():
    """Node ids numbered from 0 per tree are found through a table, ids spread wide (which onnxruntime
    refuses) by binary search: both name the same nodes, so the outputs are the same, and both refuse a
    pair named twice or a branch to a node that is not there."""
    nodes, leaves = random_trees(6, 4, 5, targets=1, seed=11)

    def regressor(spread, **changed):
        ids = {k: [i * spread for i in nodes[k]] for k in ("nodes_nodeids", "nodes_truenodeids", "nodes_falsenodeids")}
        ids |= changed
        node = ml_node("TreeEnsembleRegressor", ["X"], ["Y"], **(nodes | ids), n_targets=1,
                       target_treeids=[t for t, _, _, _ in leaves], target_nodeids=[n * spread for _, n, _, _ in leaves],
                       target_ids=[c for _, _, c, _ in leaves], target_weights=[w for _, _, _, w in leaves])
        return ml_model(node, [vi("X", F, [None, 5])], [vi("Y")])

    feeds = {"X": tree_features(21, 5)}
    dense = agree(regressor(1), feeds)
    np.testing.assert_array_equal(compile_model(regressor(100_000)).run(feeds)["Y"], dense[0])
    for spread in (1, 100_000):
        twice = [i * spread for i in nodes["nodes_nodeids"]]
        twice[1] = twice[0]
        dangling = [i * spread for i in nodes["nodes_truenodeids"]]
        dangling[0] = (max(nodes["nodes_nodeids"]) + 1) * spread
        for changed, why in (({"nodes_nodeids": twice}, "share a"), ({"nodes_truenodeids": dangling}, "does not exist")):
            with pytest.raises(RtdError) as e:
                compile_model(regressor(spread, **changed))
            assert e.value.code is Code.E_MODEL_INVALID and why in e.value.detail
