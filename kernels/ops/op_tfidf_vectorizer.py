"""TfIdfVectorizer: counts of the pool's n-grams in each row of tokens (ints or strings),
weighted by mode TF (counts), IDF (weight where present) or TFIDF (count * weight).

The pool lists the 1-grams, then the 2-grams, ...; ngram_counts gives where each size starts,
ngram_indexes the output column of each n-gram. A repeated n-gram is refused, and so are weights
not one per n-gram (as onnxruntime refuses them).
Sizes outside [min_gram_length, max_gram_length] are never counted. An n-gram of size k >= 2
is also looked for with its items spread by every skip 1..max_skip_count (distance skip + 1);
1-grams are counted once. The i-th weight is the i-th n-gram's, so it scales column
ngram_indexes[i] (the spec and onnxruntime; onnx.reference reads weights by output column).

Tokens become ids of the pool's vocabulary (a dict for strings, a sorted search for ints); an n-gram of size k is found one
item at a time: (code of its first j items) * V + id of item j + 1 is looked up in the sorted
codes of the pool's (j + 1)-item prefixes, so every window of every row moves together and no
code outgrows int64. The hits of every size and skip are counted once at the end (np.unique),
never as a dense count per pass.
"""
import itertools

import numpy as np

from rtd.errors import Code

from ._strings import TEXT, StringKernel
from .base import REQUIRED

_MODES = ("TF", "IDF", "TFIDF")


def _find(table: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Each key's position in the sorted `table`, -1 where absent."""
    if table.size == 0:
        return np.full(keys.shape, -1, np.int64)
    at = np.minimum(np.searchsorted(table, keys), table.size - 1)
    return np.where(table[at] == keys, at, -1)


class TfIdfVectorizer_9(StringKernel):
    attributes = {"mode": REQUIRED, "min_gram_length": REQUIRED, "max_gram_length": REQUIRED, "max_skip_count": REQUIRED,
                  "ngram_counts": REQUIRED, "ngram_indexes": REQUIRED, "pool_int64s": None, "pool_strings": None, "weights": None}

    def setup(self):
        if self.mode not in _MODES:
            self.refuse(f"mode {self.mode!r} is not one of {list(_MODES)}")
        if (self.pool_int64s is None) == (self.pool_strings is None):
            self.refuse("exactly one of pool_int64s and pool_strings must be set")
        if not 1 <= self.min_gram_length <= self.max_gram_length or self.max_skip_count < 0:
            self.refuse(f"gram lengths {self.min_gram_length}..{self.max_gram_length}, max_skip_count {self.max_skip_count}")
        self.textual = self.pool_strings is not None
        pool = np.array(list(self.pool_strings), dtype=TEXT) if self.textual else np.asarray(self.pool_int64s, np.int64)
        columns = np.asarray(self.ngram_indexes, np.int64).reshape(-1)
        if columns.size == 0 or columns.min() < 0:
            self.refuse("ngram_indexes must be non-empty and non-negative")
        self.width = int(columns.max()) + 1
        self.vocab = np.unique(pool)
        self.index = {word: i for i, word in enumerate(self.vocab.tolist())} if self.textual else None
        self.sizes = self._tables(pool, columns)
        self.column_weights = np.ones(self.width, np.float32)
        if self.weights is not None:
            weights = np.asarray(self.weights, np.float32).reshape(-1)
            if weights.size != columns.size:
                self.refuse(f"{weights.size} weights for {columns.size} n-grams")
            self.column_weights[columns] = weights

    def _tables(self, pool, columns):
        """For each counted size k: (k, token id -> first-item code, prefix tables of 1..k items,
        output column of each full code)."""
        starts = [int(s) for s in self.ngram_counts] + [pool.size]
        if any(b < a for a, b in zip(starts, starts[1:])) or starts[0] < 0:
            self.refuse(f"ngram_counts {list(self.ngram_counts)} do not split a pool of {pool.size}")
        tables, numbered = [], 0
        for k, (begin, end) in enumerate(zip(starts, starts[1:]), start=1):
            if (end - begin) % k:
                self.refuse(f"{end - begin} pool items are not whole {k}-grams")
            grams = np.searchsorted(self.vocab, pool[begin:end]).reshape(-1, k)
            number = numbered + np.arange(len(grams))
            numbered += len(grams)
            if number.size and number[-1] >= columns.size:
                self.refuse(f"{columns.size} ngram_indexes for at least {number[-1] + 1} n-grams")
            if self.min_gram_length <= k <= self.max_gram_length and len(grams):
                levels, codes = [], np.zeros(len(grams), np.int64)
                for j in range(k):
                    keys = codes * self.vocab.size + grams[:, j]
                    levels.append(np.unique(keys))
                    codes = np.searchsorted(levels[-1], keys)
                if levels[-1].size != len(codes):
                    self.refuse(f"a {k}-gram is repeated in the pool")
                full = np.empty(len(codes), np.int64)
                full[codes] = columns[number]
                first = np.full(self.vocab.size + 1, -1, np.int64)   # token id -> 1-item prefix code; id -1 reads the last
                first[levels[0]] = np.arange(levels[0].size)
                tables.append((k, first, levels, full))
        return tables

    def compute(self, x):
        if self.textual != (x.dtype == object) or (not self.textual and x.dtype.kind not in "iu"):
            self.refuse(f"input dtype {x.dtype} for a {'string' if self.textual else 'int64'} pool", Code.E_INPUT_INVALID)
        if x.ndim > 2:
            self.refuse(f"input must be [C] or [N, C], got shape {list(x.shape)}", Code.E_INPUT_INVALID)
        rows = x.reshape(1 if x.ndim < 2 else x.shape[0], -1)
        if self.textual:   # dict lookups through a C-level map: far faster than searching sorted strings
            words = self.texts(rows).reshape(-1)
            ids = np.fromiter(map(self.index.get, words, itertools.repeat(-1)), np.int64, words.size).reshape(rows.shape)
        else:
            ids = _find(self.vocab, rows.astype(np.int64))
        hits = []
        row_base = (np.arange(rows.shape[0], dtype=np.int64) * self.width)[:, None]
        length = rows.shape[1]
        for k, first, levels, full in self.sizes:
            for distance in range(1, 2 if k == 1 else self.max_skip_count + 2):
                starts = length - (k - 1) * distance
                if starts <= 0:
                    break
                codes = first[ids[:, :starts]]
                for j in range(1, k):
                    item = ids[:, j * distance:j * distance + starts]
                    found = _find(levels[j], codes * self.vocab.size + item)
                    codes = np.where((codes >= 0) & (item >= 0), found, -1)
                hit = codes >= 0
                hits.append((row_base + full[np.where(hit, codes, 0)])[hit])
        y = np.zeros((rows.shape[0], self.width), np.float32)
        if hits:
            cells, counts = np.unique(np.concatenate(hits), return_counts=True)
            y.reshape(-1)[cells] = counts
        if self.mode == "IDF":
            y = (y > 0) * self.column_weights
        elif self.mode == "TFIDF":
            y *= self.column_weights
        return (y.astype(np.float32, copy=False).reshape(self.width) if x.ndim < 2 else y.astype(np.float32, copy=False),)
