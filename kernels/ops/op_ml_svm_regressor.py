"""ai.onnx.ml SVMRegressor: sum of coefficient x K(x, support vector) plus rho (or a linear
model when n_supports is 0); one_class gives +1/-1 by the sign. float32 [N, 1]."""
import numpy as np

from rtd.errors import Code

from ._ml import POST_TRANSFORMS, MlKernel, post_transform
from ._svm import SvmKernel


class SVMRegressor_1(MlKernel):
    attributes = {"coefficients": None, "kernel_params": None, "kernel_type": "LINEAR", "n_supports": 0,
                  "one_class": 0, "post_transform": "NONE", "rho": None, "support_vectors": None}

    def setup(self):
        self.choice("post_transform", POST_TRANSFORMS)
        self.coef = np.asarray(self.coefficients or [], np.float64)
        if not self.rho or len(self.rho) != 1:
            self.refuse("rho must hold one value")
        if self.n_supports:
            self.kernel = SvmKernel(self.op_type, self.kernel_type, self.kernel_params, self.support_vectors,
                                    self.n_supports)
            if self.coef.size != self.n_supports:
                self.refuse(f"{self.coef.size} coefficients for {self.n_supports} support vectors")
        elif not self.coef.size:
            self.refuse("coefficients missing")

    def compute(self, x):
        x = self.features(x)
        if self.n_supports:
            score = self.kernel(x) @ self.coef
        elif x.shape[1] != self.coef.size:
            self.refuse(f"{self.coef.size} coefficients for {x.shape[1]} features", Code.E_INPUT_INVALID)
        else:
            score = x.astype(np.float64) @ self.coef
        score = score + self.rho[0]
        if self.one_class:
            score = np.where(score > 0, 1.0, -1.0)
        score = score.astype(np.float32).reshape(-1, 1)
        return (score if self.post_transform != "PROBIT" else post_transform(score, "PROBIT"),)
