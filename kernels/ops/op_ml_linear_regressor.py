"""ai.onnx.ml LinearRegressor: Y = X @ coefficients^T + intercepts ([N, targets], float32), then a post transform."""
import numpy as np

from rtd.errors import Code

from ._ml import POST_TRANSFORMS, MlKernel, post_transform


class LinearRegressor_1(MlKernel):
    attributes = {"coefficients": None, "intercepts": None, "targets": 1, "post_transform": "NONE"}

    def setup(self):
        self.choice("post_transform", POST_TRANSFORMS)
        if not self.coefficients or self.targets < 1 or len(self.coefficients) % self.targets:
            self.refuse(f"{len(self.coefficients or [])} coefficients for {self.targets} targets")
        self.coef = np.asarray(self.coefficients, np.float32).reshape(self.targets, -1)
        self.bias = np.asarray(self.intercepts or [0.0] * self.targets, np.float32)
        if self.bias.size != self.targets:
            self.refuse(f"{self.bias.size} intercepts for {self.targets} targets")

    def compute(self, x):
        x = self.features(x)
        if x.shape[1] != self.coef.shape[1]:
            self.refuse(f"the model has {self.coef.shape[1]} features, the input {x.shape[1]}", Code.E_INPUT_INVALID)
        return (post_transform(x @ self.coef.T + self.bias, self.post_transform),)
