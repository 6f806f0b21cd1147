"""StringSplit: each string split on `delimiter` into a new last axis, padded with "" to the
longest split, and the number of pieces of each.

With no delimiter (or ""), runs of whitespace separate and leading/trailing whitespace is
dropped (Python's str.split(), also after the last split that `maxsplit` allows); otherwise every
delimiter separates, so neighbours delimit an empty piece. `maxsplit` caps the splits: the
unsplit rest is the last piece. As onnx.reference, and unlike onnxruntime: "" split on a
delimiter is one empty piece (onnxruntime: none), and whitespace is Unicode's (tabs, newlines;
onnxruntime splits on spaces only).
"""
import operator

import numpy as np

from ._strings import StringKernel


class StringSplit_20(StringKernel):
    attributes = {"delimiter": None, "maxsplit": None}

    def setup(self):
        if self.maxsplit is not None and self.maxsplit < 0:   # Python's -1 means no cap; ONNX leaves it unset
            self.refuse(f"maxsplit {self.maxsplit} is negative")

    def compute(self, x):
        # str.split through a C-level map: np.char.split drops a delimiter's trailing NUL, np.strings.strip strips NULs
        flat = self.texts(x).reshape(-1)
        if not self.delimiter and self.maxsplit is not None:
            flat = map(str.strip, flat)
        flat = list(map(operator.methodcaller("split", self.delimiter or None, -1 if self.maxsplit is None else self.maxsplit), flat))
        counts = np.fromiter(map(len, flat), np.int64, len(flat))
        width = int(counts.max(initial=0))
        y = np.full((len(flat), width), "", dtype=object)
        y[np.arange(width) < counts[:, None]] = [piece for row in flat for piece in row]
        return y.reshape(*x.shape, width), counts.reshape(x.shape)
