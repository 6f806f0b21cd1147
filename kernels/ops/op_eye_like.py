"""EyeLike: a 2-D tensor shaped like the input with ones on diagonal k (dtype attribute or input's)."""
from onnx import helper

from .base import Kernel


class EyeLike_9(Kernel):
    attributes = {"dtype": None, "k": 0}

    def setup(self):
        self.out_dtype = None if self.dtype is None else helper.tensor_dtype_to_np_dtype(self.dtype)

    def run(self, x):
        rows, cols = x.shape
        return (self.xp.eye(rows, cols, k=self.k, dtype=self.out_dtype or x.dtype),)
