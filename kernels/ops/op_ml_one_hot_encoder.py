"""ai.onnx.ml OneHotEncoder: a new last axis over the categories, 1.0 where the element is that
category; an element outside them is all zeros, or refused when `zeros` is 0."""
import numpy as np

from rtd.errors import Code

from ._ml import MlKernel, map_values


class OneHotEncoder_1(MlKernel):
    attributes = {"cats_int64s": None, "cats_strings": None, "zeros": 1}

    def setup(self):
        cats = self.one_of("cats_int64s", "cats_strings")
        self.strings = self.cats_strings is not None
        self.index = {c: i for i, c in enumerate(cats)}
        self.n = len(cats)

    def compute(self, x):
        if (x.dtype == object) != self.strings:
            self.refuse(f"input dtype {x.dtype} does not match the categories' type", Code.E_OP_UNSUPPORTED)
        index = map_values(x if self.strings else x.astype(np.int64), self.index, -1, np.int64)
        if not self.zeros and (index < 0).any():
            self.refuse("an input value is not among the categories (zeros=0)", Code.E_INPUT_INVALID)
        return ((index[..., None] == np.arange(self.n)).astype(np.float32),)
