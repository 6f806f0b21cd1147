"""StringSplit: each string split on `delimiter` into a new last axis, padded with "" to the
longest split, and the number of pieces of each.

With no delimiter (or ""), runs of whitespace separate and leading/trailing whitespace is
dropped (Python's str.split()); otherwise every delimiter separates, so neighbours delimit an
empty piece. `maxsplit` caps the splits: the unsplit rest is the last piece.
"""
import numpy as np

from ._strings import StringKernel


class StringSplit_20(StringKernel):
    attributes = {"delimiter": None, "maxsplit": None}

    def setup(self):
        if self.maxsplit is not None and self.maxsplit < 0:   # Python's -1 means no cap; ONNX leaves it unset
            self.refuse(f"maxsplit {self.maxsplit} is negative")

    def compute(self, x):
        pieces = np.char.split(self.strings(x), self.delimiter or None, -1 if self.maxsplit is None else self.maxsplit)
        flat = pieces.reshape(-1)
        counts = np.fromiter(map(len, flat), np.int64, flat.size)
        width = int(counts.max(initial=0))
        y = np.full((flat.size, width), "", dtype=object)
        y[np.arange(width) < counts[:, None]] = [piece for row in flat for piece in row]
        return y.reshape(*x.shape, width), counts.reshape(x.shape)
