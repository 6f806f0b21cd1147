"""Tree ensembles as flat node arrays, built once when the kernel is made, walked for every
sample and every tree at once: one NumPy step per tree level, no Python loop per sample.

Every node, branch or leaf, has a slot; a leaf's two successors are itself, so after `depth`
steps each (sample, tree) pair rests on its leaf. Leaf contributions are a dense table
[leaf rows, targets] summed tree by tree. Node modes use TreeEnsemble-5's numbering.
"""
import functools

import numpy as np

from rtd.errors import Code, RtdError
from ..native import compiled
from ._ml import PREPARED

LEAF = -1
MODES = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3, "BRANCH_EQ": 4, "BRANCH_NEQ": 5,
         "LEAF": LEAF}
MEMBER = 6
AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")  # TreeEnsemble-5 numbers them in this order
BLOCK = 1 << 20  # (sample, tree) pairs walked at once
# how forest.c's rtd_forest_predict_* reads the combined weights (forest.h): a regressor's targets, a classifier's
# classes, or two classes as onnxruntime writes them (both columns; one: v0 for PROBIT, [1 - s, s], [-s, s])
TARGETS, CLASSES, BINARY_PAIR, BINARY_PROBIT, BINARY_COMPLEMENT, BINARY_SIGNED = range(6)
_CTYPES = {np.dtype(np.int32): "int32_t[]", np.dtype(np.float32): "float[]", np.dtype(np.float64): "double[]"}


def _compare(mode: int, v: np.ndarray, t: np.ndarray) -> np.ndarray:
    return (np.less_equal, np.less, np.greater_equal, np.greater, np.equal, np.not_equal)[mode](v, t)


class Forest:
    """Trees over node arrays (index = slot): feature, threshold, mode, true/false successor,
    whether a missing (NaN) value goes the true way; `roots` one slot per tree; `members` the
    value sets of MEMBER nodes as NaN-padded rows."""

    def __init__(self, op: str, feature, threshold, mode, true_next, false_next, missing_true, roots,
                 members: np.ndarray | None = None):
        self.op = op
        self.mode = np.asarray(mode, np.int8)
        n = len(self.mode)
        leaf = self.mode == LEAF
        slots = np.arange(n)
        self.true_next = np.where(leaf, slots, np.asarray(true_next, np.int64))
        self.false_next = np.where(leaf, slots, np.asarray(false_next, np.int64))
        self.feature = np.where(leaf, 0, np.asarray(feature, np.int64))
        self.threshold = np.asarray(threshold, np.float64)
        self.missing_true = np.asarray(missing_true, bool)
        self.roots = np.asarray(roots, np.int64)
        self.members = members
        if not n or not len(self.roots):
            self.refuse("the ensemble has no trees")
        for name, values in (("successor", self.true_next), ("successor", self.false_next), ("root", self.roots)):
            if values.min() < 0 or values.max() >= n:
                self.refuse(f"a {name} points outside the {n} nodes")
        if self.feature.min() < 0:
            self.refuse("a negative feature id")
        self.n_features = int(self.feature.max()) + 1
        branch_modes = set(np.unique(self.mode[~leaf]).tolist())
        self.uniform = branch_modes.pop() if len(branch_modes) == 1 and MEMBER not in branch_modes else None
        self.depth = self._depth(leaf)

    def refuse(self, detail: str):
        raise RtdError(Code.E_MODEL_INVALID, f"{self.op}: {detail}")

    def _depth(self, leaf: np.ndarray) -> int:
        """Steps until every walk rests on a leaf; a cycle among the nodes is refused. Each level's
        nodes are counted once (a mark per node, not a sort: deep leaf-wise trees have hundreds of levels)."""
        marked = np.zeros(len(leaf), bool)
        marked[self.roots] = True
        frontier, depth = np.flatnonzero(marked), 0
        while len(frontier := frontier[~leaf[frontier]]):
            depth += 1
            if depth > len(leaf):
                self.refuse("the nodes form a cycle")
            marked[:] = False
            marked[self.true_next[frontier]] = True
            marked[self.false_next[frontier]] = True
            frontier = np.flatnonzero(marked)
        return depth

    def leaves(self, x: np.ndarray) -> np.ndarray:
        """The leaf slot each sample reaches in each tree: [N, trees], walked in blocks of
        samples so the walk's temporaries stay near BLOCK elements whatever the batch."""
        if x.shape[1] < self.n_features:
            raise RtdError(Code.E_INPUT_INVALID, f"{self.op}: the trees read {self.n_features} features, "
                           f"the input has {x.shape[1]}")
        step = max(1, BLOCK // len(self.roots))
        return np.concatenate([self._walk(x[i:i + step]) for i in range(0, x.shape[0], step)] or
                              [np.zeros((0, len(self.roots)), np.int64)])

    def _walk(self, x: np.ndarray) -> np.ndarray:
        x = x.astype(np.float64)
        at = np.broadcast_to(self.roots, (x.shape[0], len(self.roots))).copy()
        rows = np.arange(x.shape[0])[:, None]
        for _ in range(self.depth):
            v = x[rows, self.feature[at]]
            t = self.threshold[at]
            if self.uniform is not None:
                go = _compare(self.uniform, v, t)
            else:
                mode = self.mode[at]
                go = np.zeros(at.shape, bool)
                for m in range(6):
                    go |= (mode == m) & _compare(m, v, t)
                if self.members is not None:
                    go |= (mode == MEMBER) & (v[..., None] == self.members[at]).any(axis=-1)
            go |= np.isnan(v) & self.missing_true[at]  # NaN fails every test but NEQ, unless it tracks true
            at = np.where(go, self.true_next[at], self.false_next[at])
        return at


class LeafTable:
    """What each leaf adds to each target, for the NumPy walk: a table of weights [rows, targets]
    (row 0 adds nothing), the row of each node's slot, and which (row, target) pairs a leaf
    carries. The lists are checked when it is made; the tables are built on the first NumPy
    walk, which a forest that forest.c scores never makes (a second of a 200 MB ensemble's compile)."""

    def __init__(self, op: str, n_slots: int, slots, targets, weights, n_targets: int):
        slots, targets = np.asarray(slots, np.int64), np.asarray(targets, np.int64)
        weights = np.asarray(weights, np.float64)
        if not len(slots) == len(targets) == len(weights):
            raise RtdError(Code.E_MODEL_INVALID, f"{op}: leaf node, target and weight lists differ in length")
        if len(targets) and (targets.min() < 0 or targets.max() >= n_targets):
            raise RtdError(Code.E_MODEL_INVALID, f"{op}: a leaf target outside 0..{n_targets - 1}")
        self._lists = n_slots, slots, targets, weights, n_targets

    @functools.cached_property
    def _tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n_slots, slots, targets, weights, n_targets = self._lists
        used, rows = np.unique(slots, return_inverse=True)
        row = np.zeros(n_slots, np.int64)
        row[used] = np.arange(1, len(used) + 1)
        table = np.zeros((len(used) + 1, n_targets))
        np.add.at(table, (rows + 1, targets), weights)
        present = np.zeros(table.shape, bool)
        present[rows + 1, targets] = True
        return row, table, present

    def aggregate(self, at: np.ndarray, how: str) -> np.ndarray:
        """Per sample and target, the trees' contributions combined (float64 [N, targets]);
        NaN for a target that no reached leaf carries."""
        row, weights, present = self._tables
        rows = row[at]
        if how in ("SUM", "AVERAGE"):
            total = np.zeros((at.shape[0], weights.shape[1]))
            scored = np.zeros(total.shape, bool)
            for tree in range(at.shape[1]):
                total += weights[rows[:, tree]]
                scored |= present[rows[:, tree]]
            return np.where(scored, total / at.shape[1] if how == "AVERAGE" else total, np.nan)
        pick = np.fmin if how == "MIN" else np.fmax
        best = np.full((at.shape[0], weights.shape[1]), np.nan)
        for tree in range(at.shape[1]):
            r = rows[:, tree]
            best = pick(best, np.where(present[r], weights[r], np.nan))
        return best


class NodeIds:
    """The v1/v3 naming of nodes by (tree id, node id), looked up in bulk: each pair as one int64 key
    (the tree id's rank, then the node id's offset). Exporters number each tree's nodes from 0, so
    the keys are nearly dense: a table from key to slot, one gather per lookup; ids spread wider
    than TABLE_SPREAD times the node count are found by binary search in the sorted keys instead."""

    TABLE_SPREAD = 4

    def __init__(self, op: str, treeids, nodeids):
        self.op = op
        t, i = np.asarray(treeids, np.int64).reshape(-1), np.asarray(nodeids, np.int64).reshape(-1)
        self.trees = np.unique(t)
        self.low = int(i.min()) if len(i) else 0
        self.span = int(i.max()) - self.low + 1 if len(i) else 1
        if len(self.trees) * self.span >= 1 << 62:
            raise RtdError(Code.E_OP_UNSUPPORTED, f"{op}: node ids spread over more than 2^62 values")
        keys = self._keys(t, i)
        if len(self.trees) * self.span <= self.TABLE_SPREAD * len(keys) + 1024:
            self.table = np.full(len(self.trees) * self.span, -1, np.int32)   # a model holds < 2^31 nodes
            self.table[keys] = np.arange(len(keys), dtype=np.int32)
            shared = np.count_nonzero(self.table >= 0) != len(keys)
        else:
            self.table = None
            self.order = np.argsort(keys, kind="stable")
            self.sorted = keys[self.order]
            shared = (self.sorted[1:] == self.sorted[:-1]).any()
        if shared:
            raise RtdError(Code.E_MODEL_INVALID, f"{op}: two nodes share a (tree id, node id)")

    def _keys(self, t: np.ndarray, i: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.trees, t).astype(np.int64) * self.span + (i - self.low)

    def slots(self, treeids, nodeids, what: str) -> np.ndarray:
        """The slot of each (tree id, node id) pair; a pair that names no node is refused."""
        t, i = np.asarray(treeids, np.int64).reshape(-1), np.asarray(nodeids, np.int64).reshape(-1)
        rank = np.minimum(np.searchsorted(self.trees, t), len(self.trees) - 1)
        known = (self.trees[rank] == t) & (i >= self.low) & (i < self.low + self.span)
        keys = np.where(known, rank * self.span + (i - self.low), 0)
        if self.table is not None:
            found = self.table[keys].astype(np.int64)
            missing = ~known | (found < 0)
        else:
            at = np.minimum(np.searchsorted(self.sorted, keys), len(self.sorted) - 1)
            found = self.order[at]
            missing = ~known | (self.sorted[at] != keys)
        if missing.any():
            k = int(np.flatnonzero(missing)[0])
            raise RtdError(Code.E_MODEL_INVALID, f"{self.op}: {what} names node {(int(t[k]), int(i[k]))}, which does not exist")
        return found


def from_node_lists(op: str, treeids, nodeids, modes, featureids, values, truenodeids, falsenodeids,
                    missing_true) -> tuple[Forest, NodeIds]:
    """A Forest from the v1/v3 attribute lists (nodes named by (tree id, node id)), and that naming."""
    n = len(nodeids)
    lists = {"nodes_treeids": treeids, "nodes_modes": modes, "nodes_featureids": featureids, "nodes_values": values,
             "nodes_truenodeids": truenodeids, "nodes_falsenodeids": falsenodeids}
    if any(v is None or len(v) != n for v in lists.values()) or (missing_true and len(missing_true) != n):
        raise RtdError(Code.E_MODEL_INVALID, f"{op}: the nodes_* lists differ in length")
    unknown = set(modes) - set(MODES)   # a handful of distinct strings, however many nodes
    if unknown:
        raise RtdError(Code.E_OP_UNSUPPORTED, f"{op}: nodes_modes {sorted(map(str, unknown))}")
    mode = np.fromiter(map(MODES.__getitem__, modes), np.int8, count=n)   # no Python frame per node
    ids = NodeIds(op, treeids, nodeids)
    tree = np.asarray(treeids, np.int64).reshape(-1)
    branch = np.flatnonzero(mode != LEAF)

    def successor(targets):
        next_slot = np.arange(n)   # a leaf's successors are itself
        next_slot[branch] = ids.slots(tree[branch], np.asarray(targets, np.int64).reshape(-1)[branch], "a branch")
        return next_slot

    # a tree's root is its first node, as onnxruntime takes it (trees in id order)
    first = np.unique(tree, return_index=True)[1]
    forest = Forest(op, featureids, values, mode, successor(truenodeids), successor(falsenodeids),
                    missing_true or [0] * n, first)
    return forest, ids


def leaf_slots(op: str, ids: NodeIds, treeids, nodeids) -> np.ndarray:
    """The slots of the (tree id, node id) pairs that carry leaf weights."""
    if treeids is None or nodeids is None or len(treeids) != len(nodeids):
        raise RtdError(Code.E_MODEL_INVALID, f"{op}: leaf tree and node id lists differ in length")
    return ids.slots(treeids, nodeids, "a leaf weight")


class Scorer:
    """A Forest and its leaves' weights as forest.c's node table, or None where that C is absent
    or the trees use what it does not walk (set membership, a feature id past 2^24).

    `scores(x, how)` is `LeafTable.aggregate(Forest.leaves(x), how)` computed in C: compared and
    summed in x's precision as onnxruntime does (float32 thresholds and sums for float32 rows)."""

    def __init__(self, forest: "Forest", slots, targets, weights, n_targets: int):
        self.op, self.n_roots, self.n_features = forest.op, len(forest.roots), forest.n_features
        leaf = forest.mode == LEAF
        slots, targets = np.asarray(slots, np.int64), np.asarray(targets, np.int32)
        weights = np.asarray(weights, np.float64)
        order = np.argsort(slots, kind="stable")   # each leaf's weights together, in the order given
        slots, targets, weights = slots[order], targets[order], weights[order]
        count = np.bincount(slots, minlength=len(leaf))   # slots name nodes: NodeIds checked them
        first = np.cumsum(count) - count
        key = (forest.feature | forest.mode.astype(np.int64) << 24 | forest.missing_true.astype(np.int64) << 27)
        key = np.where(leaf, -1, key).astype(np.int32)
        # a leaf's value is its first weight (what onnxruntime adds for a single target)
        value = np.where(leaf, np.where(count > 0, weights[np.minimum(first, len(weights) - 1)] if len(weights) else 0.0, 0.0),
                         forest.threshold)
        arrays = (key, np.where(leaf, first, forest.false_next).astype(np.int32), np.where(leaf, count, forest.true_next).astype(np.int32),
                  np.ascontiguousarray(value, np.float64), forest.roots.astype(np.int32), targets, weights)
        self._arrays = arrays   # kept alive while the handle is made; forest.c copies them
        ffi, lib = compiled.ffi, compiled.lib
        status = ffi.new("int64_t *")
        key_, false_next, true_next, value_, roots, targets_, weights_ = (ffi.from_buffer(_CTYPES[a.dtype], a) for a in arrays)
        handle = lib.rtd_forest_new(len(key), key_, false_next, true_next, value_, len(roots), roots, forest.depth, len(weights),
                                    targets_, weights_, n_targets, self.n_features, status)
        del self._arrays
        if handle == ffi.NULL:
            raise RtdError(Code.E_MODEL_INVALID if status[0] == -2 else Code.E_INTERNAL,
                           f"{self.op}: the compiled forest refused the trees (status {status[0]})")
        self.handle = ffi.gc(handle, lib.rtd_forest_free, size=key.nbytes * 4 + weights.nbytes * 2)
        self.n_targets = n_targets

    @classmethod
    def of(cls, forest: "Forest", slots, targets, weights, n_targets: int) -> "Scorer | None":
        if compiled is None or forest.members is not None or forest.n_features > 1 << 24:
            return None
        return cls(forest, slots, targets, weights, n_targets)

    def predict(self, x: np.ndarray, reading: "Reading") -> tuple[np.ndarray, np.ndarray, bool]:
        """The op's scores (in x's type) and per row the best class (empty for TARGETS), read from the trees'
        combined weights as `reading` says, in one C call: what the op's NumPy reading of `scores` gives, its
        post transform's first steps taken where `reading.transform` names one (and whether a row needs care:
        _ml.post_transform_prepared)."""
        if x.shape[1] < self.n_features:
            raise RtdError(Code.E_INPUT_INVALID, f"{self.op}: the trees read {self.n_features} features, the input has {x.shape[1]}")
        x = np.ascontiguousarray(x)
        ffi, lib = compiled.ffi, compiled.lib
        output, n = reading.output, x.shape[0]
        scores = np.empty((n, self.n_targets if output <= BINARY_PAIR else 1 if output == BINARY_PROBIT else 2), x.dtype)
        best = np.empty(0 if output == TARGETS else n, np.int64)
        ctype = _CTYPES[x.dtype]
        predict = lib.rtd_forest_predict_f32 if x.dtype == np.float32 else lib.rtd_forest_predict_f64
        status = predict(self.handle, ffi.from_buffer(ctype, x), x.size, n, x.shape[1], reading.aggregate, output,
                         reading.base, reading.base_len, reading.threshold, reading.transform, ffi.from_buffer(ctype, scores), scores.size,
                         ffi.from_buffer("int64_t[]", best) if best.size else ffi.NULL, best.size)
        if status == -2:
            raise RtdError(Code.E_MODEL_INVALID, f"{self.op}: a tree walk ran past the trees' depth")
        if status < 0:
            raise RtdError(Code.E_INTERNAL, f"{self.op}: the compiled forest refused its arguments (status {status})")
        return scores, best, status == 1

    def scores(self, x: np.ndarray, how: str) -> np.ndarray:
        """Per row and target the trees' weights combined (float64 [N, targets]); NaN where no reached leaf carries the target."""
        if x.shape[1] < self.n_features:
            raise RtdError(Code.E_INPUT_INVALID, f"{self.op}: the trees read {self.n_features} features, the input has {x.shape[1]}")
        x = np.ascontiguousarray(x)
        ffi, lib = compiled.ffi, compiled.lib
        out = np.empty((x.shape[0], self.n_targets), x.dtype)
        has = np.empty(out.shape, np.uint8)
        score = lib.rtd_forest_score_f32 if x.dtype == np.float32 else lib.rtd_forest_score_f64
        status = score(self.handle, ffi.from_buffer(_CTYPES[x.dtype], x), x.size, x.shape[0], x.shape[1], AGGREGATES.index(how),
                       ffi.from_buffer(_CTYPES[x.dtype], out), ffi.from_buffer("uint8_t[]", has), out.size)
        if status == -2:
            raise RtdError(Code.E_MODEL_INVALID, f"{self.op}: a tree walk ran past the trees' depth")
        if status != 0:
            raise RtdError(Code.E_INTERNAL, f"{self.op}: the compiled forest refused its arguments (status {status})")
        total = out.astype(np.float64)
        if how == "AVERAGE":
            total /= self.n_roots
        return np.where(has.view(bool), total, np.nan)


def combined(forest: Forest, table: LeafTable, scorer: Scorer | None, x: np.ndarray, how: str) -> np.ndarray:
    """The trees' weights per row and target (float64 [N, targets], NaN where no reached leaf scores one):
    the compiled walk where there is one, else NumPy's. `x` is in the precision the trees compare in."""
    if scorer is not None:
        return scorer.scores(x, how)
    return table.aggregate(forest.leaves(x), how)


class Reading:
    """How a tree op reads its trees' combined weights in Scorer.predict: the aggregate, the output form (TARGETS
    ...), base values (float64; none: no add), the weight over which two classes' label is the second, and the
    post transform the op applies to the scores (its first steps taken in C where _ml.PREPARED has it)."""

    def __init__(self, how: str, output: int, base: np.ndarray | None = None, threshold: float = 0.0,
                 transform: str = "NONE"):
        self.aggregate, self.output, self.threshold = AGGREGATES.index(how), output, float(threshold)
        self.transform = PREPARED.get(transform, 0)
        self._base = np.ascontiguousarray(base if base is not None else np.zeros(0), np.float64)
        self.base_len = self._base.size
        self.base = compiled.ffi.from_buffer("double[]", self._base) if self.base_len else compiled.ffi.NULL
