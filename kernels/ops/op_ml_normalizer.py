"""ai.onnx.ml Normalizer: each row divided by its MAX, L1 or L2 norm (a zero norm leaves the row
as it is); float32 out. MAX is the row's largest value, not its largest magnitude, as in onnxruntime."""
import numpy as np

from ._ml import MlKernel


class Normalizer_1(MlKernel):
    attributes = {"norm": "MAX"}

    def setup(self):
        self.choice("norm", ("MAX", "L1", "L2"))

    def compute(self, x):
        shape, x = x.shape, self.features(x)
        if self.norm == "MAX":
            norm = x.max(axis=-1, keepdims=True)
        elif self.norm == "L1":
            norm = np.abs(x).sum(axis=-1, keepdims=True)
        else:
            norm = np.sqrt(np.square(x).sum(axis=-1, keepdims=True))
        return (np.where(norm != 0, x / np.where(norm != 0, norm, 1), x).astype(np.float32).reshape(shape),)
