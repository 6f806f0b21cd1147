"""ai.onnx.ml Binarizer: 1 where x > threshold, else 0, in the input's type."""
from ._ml import MlKernel


class Binarizer_1(MlKernel):
    attributes = {"threshold": 0.0}

    def compute(self, x):
        return ((x > x.dtype.type(self.threshold)).astype(x.dtype),)
