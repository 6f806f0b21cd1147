"""ai.onnx.ml TreeEnsembleRegressor: the trees' leaf weights per target, aggregated (SUM,
AVERAGE, MIN, MAX), plus base values, then a post transform; float32 [N, n_targets].
Version 3 may carry the float lists as double tensors (`*_as_tensor`)."""
import numpy as np

from ._forest import AGGREGATES, TARGETS, LeafTable, Reading, Scorer, combined, from_node_lists, leaf_slots
from ._ml import POST_TRANSFORMS, MlKernel, finite, post_transform, post_transform_prepared

_ATTRIBUTES = {"aggregate_function": "SUM", "base_values": None, "n_targets": None, "nodes_falsenodeids": None,
               "nodes_featureids": None, "nodes_hitrates": None, "nodes_missing_value_tracks_true": None,
               "nodes_modes": None, "nodes_nodeids": None, "nodes_treeids": None, "nodes_truenodeids": None,
               "nodes_values": None, "post_transform": "NONE", "target_ids": None, "target_nodeids": None,
               "target_treeids": None, "target_weights": None}


class TreeEnsembleRegressor_1(MlKernel):
    attributes = _ATTRIBUTES
    base_values_as_tensor = nodes_values_as_tensor = target_weights_as_tensor = nodes_hitrates_as_tensor = None

    def setup(self):
        self.choice("aggregate_function", AGGREGATES)
        self.choice("post_transform", POST_TRANSFORMS)
        if not self.n_targets or self.n_targets < 1:
            self.refuse("n_targets must be at least 1")
        self.forest, slot = from_node_lists(
            self.op_type, self.nodes_treeids, self.nodes_nodeids or [], self.nodes_modes,
            self.nodes_featureids, self.floats("nodes_values", "nodes_values_as_tensor"),
            self.nodes_truenodeids, self.nodes_falsenodeids, self.nodes_missing_value_tracks_true)
        weights = self.floats("target_weights", "target_weights_as_tensor")
        leaves = (leaf_slots(self.op_type, slot, self.target_treeids, self.target_nodeids), self.target_ids or [],
                  [] if weights is None else weights, self.n_targets)
        self.table = LeafTable(self.op_type, len(self.forest.mode), *leaves)
        self.scorer = Scorer.of(self.forest, *leaves)
        # double thresholds (v3's tensors) compare and sum in float64, as onnxruntime does
        self.precision = np.float64 if np.asarray(self.nodes_values_as_tensor).dtype == np.float64 else np.float32
        base = self.floats("base_values", "base_values_as_tensor")
        self.base = np.zeros(self.n_targets) if base is None else base
        if self.base.size != self.n_targets:
            self.refuse(f"{self.base.size} base values for {self.n_targets} targets")
        # onnxruntime transforms a single score only by PROBIT
        self.applied = self.post_transform if self.n_targets > 1 or self.post_transform == "PROBIT" else "NONE"
        self.reading = None if self.scorer is None else Reading(self.aggregate_function, TARGETS, self.base, transform=self.applied)

    def compute(self, x):
        # a target no reached leaf scores is 0, base value or not (onnxruntime)
        x = self.features(x).astype(self.precision, copy=False)
        if self.reading is not None:   # walked and read in one C call
            scores, _, careful = self.scorer.predict(x, self.reading)
            return (post_transform_prepared(scores.astype(np.float32, copy=False), self.applied, careful),)
        scores = finite(combined(self.forest, self.table, self.scorer, x, self.aggregate_function) + self.base).astype(np.float32)
        return (post_transform(scores, self.applied),)


class TreeEnsembleRegressor_3(TreeEnsembleRegressor_1):
    attributes = {**_ATTRIBUTES, "base_values_as_tensor": None, "nodes_hitrates_as_tensor": None,
                  "nodes_values_as_tensor": None, "target_weights_as_tensor": None}
