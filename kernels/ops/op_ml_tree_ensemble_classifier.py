"""ai.onnx.ml TreeEnsembleClassifier: leaf weights summed per class plus base values, a post
transform, and the label of the best class. Two classes follow onnxruntime's rules (which
sklearn-onnx's converters are checked against): a single scored column s is the positive
class, labelled positive when s > 0.5 (all weights >= 0) or s > 0, and written as [1 - s, s]
or [-s, s] (the logistic of each when that is the transform); with two base values the
scores are [-(b1 + s0), b1 + s0], s0 being the first column's sum. Version 3 may carry the
float lists as double tensors (`*_as_tensor`)."""
import numpy as np

from rtd.errors import Code

from ._forest import (BINARY_COMPLEMENT, BINARY_PAIR, BINARY_PROBIT, BINARY_SIGNED, CLASSES, LeafTable, Reading, Scorer,
                      combined, from_node_lists, leaf_slots)
from ._ml import POST_TRANSFORMS, MlKernel, binary_scores, finite, labels_array, post_transform, post_transform_prepared

_ATTRIBUTES = {"base_values": None, "class_ids": None, "class_nodeids": None, "class_treeids": None,
               "class_weights": None, "classlabels_int64s": None, "classlabels_strings": None,
               "nodes_falsenodeids": None, "nodes_featureids": None, "nodes_hitrates": None,
               "nodes_missing_value_tracks_true": None, "nodes_modes": None, "nodes_nodeids": None,
               "nodes_treeids": None, "nodes_truenodeids": None, "nodes_values": None, "post_transform": "NONE"}


class TreeEnsembleClassifier_1(MlKernel):
    attributes = _ATTRIBUTES
    base_values_as_tensor = class_weights_as_tensor = nodes_values_as_tensor = nodes_hitrates_as_tensor = None

    def setup(self):
        self.choice("post_transform", POST_TRANSFORMS)
        self.labels = labels_array(self.one_of("classlabels_int64s", "classlabels_strings"))
        n_classes = len(self.labels)
        self.forest, slot = from_node_lists(
            self.op_type, self.nodes_treeids, self.nodes_nodeids or [], self.nodes_modes,
            self.nodes_featureids, self.floats("nodes_values", "nodes_values_as_tensor"),
            self.nodes_truenodeids, self.nodes_falsenodeids, self.nodes_missing_value_tracks_true)
        weights = self.floats("class_weights", "class_weights_as_tensor")
        weights = np.zeros(0) if weights is None else weights
        leaves = (leaf_slots(self.op_type, slot, self.class_treeids, self.class_nodeids), self.class_ids or [], weights,
                  max(n_classes, 2))
        self.table = LeafTable(self.op_type, len(self.forest.mode), *leaves)
        self.scorer = Scorer.of(self.forest, *leaves)
        # double thresholds (v3's tensors) compare and sum in float64, as onnxruntime does
        self.precision = np.float64 if np.asarray(self.nodes_values_as_tensor).dtype == np.float64 else np.float32
        base = self.floats("base_values", "base_values_as_tensor")
        self.base = np.zeros(0) if base is None else base
        if n_classes > 2 and self.base.size not in (0, n_classes) or n_classes <= 2 and self.base.size > 2:
            self.refuse(f"{self.base.size} base values for {n_classes} classes")
        if n_classes < 2 and not (n_classes == 1 and self.labels[0] == 1):
            self.refuse("a single class label is served only as int64 label 1")
        ids = set(self.class_ids or [])
        self.binary = n_classes <= 2 and len(ids) == 1
        self.second = 1 in ids  # the second class column is scored by some leaf
        if self.base.size == 2 and not self.second:
            self.refuse("two base values for a binary ensemble scoring one class column", Code.E_OP_UNSUPPORTED)
        self.mixed = bool((weights < 0).any())
        self.threshold = 0.5 if self.binary and not self.mixed else 0.0
        self.classes = self.labels if n_classes >= 2 else np.array([0, 1], np.int64)
        if self.scorer is not None:
            output, self.applied = self._output()
            self.reading = Reading("SUM", output, self.base, self.threshold, self.applied)
        else:
            self.reading = None

    def _output(self) -> tuple[int, str]:
        """What the compiled reading writes, and the transform then applied: compute's NumPy reading below, case by case."""
        if len(self.labels) > 2:
            return CLASSES, self.post_transform
        if self.second or self.base.size == 2:
            return BINARY_PAIR, self.post_transform
        if self.post_transform == "PROBIT":
            return BINARY_PROBIT, "PROBIT"
        if self.binary and not self.mixed:
            return BINARY_COMPLEMENT, "NONE"
        return BINARY_SIGNED, "LOGISTIC" if self.post_transform == "LOGISTIC" else "NONE"

    def compute(self, x):
        x = self.features(x).astype(self.precision, copy=False)
        if self.reading is not None:   # walked and read in one C call; only the post transform's exp in NumPy
            scores, best, careful = self.scorer.predict(x, self.reading)
            return self.classes[best], post_transform_prepared(scores.astype(np.float32, copy=False), self.applied, careful)
        scores = combined(self.forest, self.table, self.scorer, x, "SUM")
        if len(self.labels) > 2:
            if self.base.size:
                scores = finite(scores) + self.base
                best = np.argmax(scores, axis=1)
            else:  # the label is the best class among those some reached leaf scores
                best = np.argmax(finite(scores, nan=-np.inf), axis=1)
                scores = finite(scores)
            return self.labels[best], post_transform(scores.astype(np.float32), self.post_transform)
        scores, second = finite(scores), self.second
        if self.base.size == 2:  # onnxruntime's reading: class 1 is base[1] + the first column's score
            scores[:, 1] = self.base[1] + scores[:, 0]
            scores[:, 0] = -scores[:, 1]
        elif self.base.size == 1:
            scores[:, 0] += self.base[0]
        one_column = not second and self.base.size != 2
        positive = scores[:, 1] if second else scores[:, 0]
        label = self.classes[(positive > self.threshold).astype(np.intp)]   # string labels stay str objects
        if not one_column:
            return label, post_transform(scores.astype(np.float32), self.post_transform)
        return label, binary_scores(scores[:, 0], self.post_transform, mixed=not (self.binary and not self.mixed))


class TreeEnsembleClassifier_3(TreeEnsembleClassifier_1):
    attributes = {**_ATTRIBUTES, "base_values_as_tensor": None, "class_weights_as_tensor": None,
                  "nodes_hitrates_as_tensor": None, "nodes_values_as_tensor": None}
