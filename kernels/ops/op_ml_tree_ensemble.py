"""ai.onnx.ml TreeEnsemble (opset 5): the one tree op that replaces TreeEnsembleRegressor and
TreeEnsembleClassifier's scoring. Branch nodes and leaves are separate lists; a branch's
successor is a leaf when its `nodes_trueleafs`/`nodes_falseleafs` flag says so; mode 6 tests set
membership (`membership_values`, one NaN-terminated set per such node, in node order).
Results are [N, n_targets] in the input's float type."""
import numpy as np

from ._forest import AGGREGATES, LEAF, MEMBER, TARGETS, Forest, LeafTable, Reading, Scorer, combined
from ._ml import POST_TRANSFORMS, MlKernel, finite, post_transform, post_transform_prepared
from .base import REQUIRED


class TreeEnsemble_5(MlKernel):
    attributes = {"aggregate_function": 1, "leaf_targetids": REQUIRED, "leaf_weights": REQUIRED,
                  "membership_values": None, "n_targets": REQUIRED, "nodes_falseleafs": REQUIRED,
                  "nodes_falsenodeids": REQUIRED, "nodes_featureids": REQUIRED, "nodes_hitrates": None,
                  "nodes_missing_value_tracks_true": None, "nodes_modes": REQUIRED, "nodes_splits": REQUIRED,
                  "nodes_trueleafs": REQUIRED, "nodes_truenodeids": REQUIRED, "post_transform": 0,
                  "tree_roots": REQUIRED}

    def setup(self):
        self.choice("aggregate_function", range(len(AGGREGATES)))
        self.choice("post_transform", range(len(POST_TRANSFORMS)))
        modes = np.asarray(self.nodes_modes).reshape(-1).astype(np.int64)
        k, n_leaves = len(modes), len(self.leaf_targetids)
        lists = [self.nodes_falseleafs, self.nodes_falsenodeids, self.nodes_featureids, self.nodes_trueleafs,
                 self.nodes_truenodeids, np.asarray(self.nodes_splits).reshape(-1)]
        if any(len(v) != k for v in lists) or len(np.asarray(self.leaf_weights).reshape(-1)) != n_leaves:
            self.refuse("the nodes_* (or leaf_*) lists differ in length")
        if modes.min(initial=0) < 0 or modes.max(initial=0) > MEMBER:
            self.refuse(f"nodes_modes outside 0..{MEMBER}")
        members = self._members(modes, k + n_leaves)

        def successor(ids, to_leaf):
            ids, to_leaf = np.asarray(ids, np.int64), np.asarray(to_leaf, bool)
            if (ids < 0).any() or (ids >= np.where(to_leaf, n_leaves, k)).any():
                self.refuse("a successor points outside its node or leaf list")
            return np.where(to_leaf, ids + k, ids)

        missing = self.nodes_missing_value_tracks_true or [0] * k
        self.forest = Forest(self.op_type, list(self.nodes_featureids) + [0] * n_leaves,
                             np.concatenate([np.asarray(self.nodes_splits, np.float64).reshape(-1), np.zeros(n_leaves)]),
                             np.concatenate([modes, np.full(n_leaves, LEAF)]),
                             np.concatenate([successor(self.nodes_truenodeids, self.nodes_trueleafs), np.zeros(n_leaves)]),
                             np.concatenate([successor(self.nodes_falsenodeids, self.nodes_falseleafs), np.zeros(n_leaves)]),
                             list(missing) + [0] * n_leaves, self.tree_roots, members)
        leaves = (np.arange(k, k + n_leaves), self.leaf_targetids, np.asarray(self.leaf_weights).reshape(-1), self.n_targets)
        self.table = LeafTable(self.op_type, k + n_leaves, *leaves)
        self.scorer = Scorer.of(self.forest, *leaves)
        transform = POST_TRANSFORMS[self.post_transform]
        self.applied = transform if self.n_targets > 1 or transform == "PROBIT" else None
        self.reading = None if self.scorer is None else Reading(AGGREGATES[self.aggregate_function], TARGETS, transform=self.applied or "NONE")

    def _members(self, modes, n_slots):
        """The value sets of MEMBER nodes as NaN-padded rows over every slot, or None."""
        if not (modes == MEMBER).any():
            return None
        values = np.asarray(self.membership_values if self.membership_values is not None else [], np.float64).reshape(-1)
        sets = np.split(values, np.flatnonzero(np.isnan(values)) + 1)
        sets = [s[~np.isnan(s)] for s in sets if len(s) and np.isnan(s[-1])]
        if len(sets) != int((modes == MEMBER).sum()):
            self.refuse(f"{len(sets)} membership sets for {int((modes == MEMBER).sum())} set-membership nodes")
        rows = np.full((n_slots, max(len(s) for s in sets) or 1), np.nan)
        for slot, values in zip(np.flatnonzero(modes == MEMBER), sets):
            rows[slot, :len(values)] = values
        return rows

    def compute(self, x):
        if x.dtype.kind != "f":
            self.refuse(f"input dtype {x.dtype} is not a float type")
        flat = x.reshape(1, -1) if x.ndim == 1 else x
        flat = flat.astype(np.float64 if x.dtype == np.float64 else np.float32, copy=False)   # compared in the input's precision
        if self.reading is not None and flat.dtype == x.dtype:   # walked and read in one C call (float16: rounded once, below)
            scores, _, careful = self.scorer.predict(flat, self.reading)
            if self.applied:
                scores = post_transform_prepared(scores.astype(np.float32, copy=False), self.applied, careful)
            return (scores.astype(x.dtype, copy=False),)
        scores = finite(combined(self.forest, self.table, self.scorer, flat, AGGREGATES[self.aggregate_function]))
        if self.applied:
            scores = post_transform(scores.astype(np.float32), self.applied)
        return (scores.astype(x.dtype),)
