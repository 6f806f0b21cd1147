"""ai.onnx.ml CategoryMapper: strings to int64 (cats_strings[i] → cats_int64s[i]) or int64 to
strings, by the input's type; unmapped elements take the default."""
import numpy as np

from ._ml import MlKernel, map_values


class CategoryMapper_1(MlKernel):
    attributes = {"cats_int64s": None, "cats_strings": None, "default_int64": -1, "default_string": "_Unused"}

    def setup(self):
        if self.cats_int64s is None or self.cats_strings is None or len(self.cats_int64s) != len(self.cats_strings):
            self.refuse("cats_int64s and cats_strings must be set and of one length")
        self.to_int = dict(zip(self.cats_strings, self.cats_int64s))
        self.to_str = dict(zip(self.cats_int64s, self.cats_strings))

    def compute(self, x):
        if x.dtype == object:
            return (map_values(x, self.to_int, self.default_int64, np.int64),)
        return (map_values(x.astype(np.int64), self.to_str, self.default_string, object),)
