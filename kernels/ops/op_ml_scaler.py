"""ai.onnx.ml Scaler: (X - offset) * scale per feature (one value or one per column); float32 out."""
import numpy as np

from rtd.errors import Code

from ._ml import MlKernel


class Scaler_1(MlKernel):
    attributes = {"offset": None, "scale": None}

    def setup(self):
        self.shift = np.asarray(self.offset if self.offset is not None else [0.0], np.float32)
        self.factor = np.asarray(self.scale if self.scale is not None else [1.0], np.float32)

    def compute(self, x):
        shape, x = x.shape, self.features(x)
        for name, value in (("offset", self.shift), ("scale", self.factor)):
            if value.size not in (1, x.shape[1]):
                self.refuse(f"{value.size} {name} values for {x.shape[1]} features", Code.E_INPUT_INVALID)
        return (((x - self.shift) * self.factor).astype(np.float32).reshape(shape),)
