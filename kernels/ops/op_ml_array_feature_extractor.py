"""ai.onnx.ml ArrayFeatureExtractor: the columns `y` of the last axis of x (any element type);
a 1-D x is one row."""
import numpy as np

from rtd.errors import Code

from ._ml import MlKernel


class ArrayFeatureExtractor_1(MlKernel):
    def compute(self, x, y):
        x = x.reshape(1, -1) if x.ndim == 1 else x
        index = np.asarray(y).reshape(-1).astype(np.int64)
        if index.size and (index.min() < 0 or index.max() >= x.shape[-1]):
            self.refuse(f"index outside 0..{x.shape[-1] - 1}", Code.E_INPUT_INVALID)
        return (np.take(x, index, axis=-1),)
