"""RegexFullMatch: whether each string matches `pattern` (RE2 syntax) as a whole.

The pattern is compiled by RE2 once, at compile time (kernels/ops/_re2.py); the match runs over
the tensor in one C-level map.
"""
import numpy as np

from ._re2 import compile_re2
from ._strings import StringKernel
from .base import REQUIRED


class RegexFullMatch_20(StringKernel):
    attributes = {"pattern": REQUIRED}   # the spec gives no default; onnxruntime requires it too

    def setup(self):
        self.regex = compile_re2(self.pattern, self.op_type)

    def compute(self, x):
        flat = self.texts(x).reshape(-1)
        return (np.fromiter(map(bool, map(self.regex.fullmatch, flat)), dtype=bool, count=flat.size).reshape(x.shape),)
