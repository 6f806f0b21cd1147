"""The kernel functions SVMClassifier and SVMRegressor share: K(x, v) for every sample and
support vector at once ([N, V], float64), from `kernel_type` and `kernel_params` = [gamma, coef0, degree]."""
import numpy as np

from rtd.errors import Code, RtdError

KERNELS = ("LINEAR", "POLY", "RBF", "SIGMOID")


class SvmKernel:
    def __init__(self, op: str, kernel_type: str, params, support_vectors, n_vectors: int):
        if kernel_type not in KERNELS:
            raise RtdError(Code.E_OP_UNSUPPORTED, f"{op}: kernel_type={kernel_type!r}, expected one of {list(KERNELS)}")
        params = list(params or [0.0, 0.0, 0.0])
        if len(params) != 3:
            raise RtdError(Code.E_MODEL_INVALID, f"{op}: kernel_params must be [gamma, coef0, degree]")
        vectors = np.asarray(support_vectors or [], np.float64)
        if n_vectors < 1 or vectors.size % n_vectors:
            raise RtdError(Code.E_MODEL_INVALID, f"{op}: {vectors.size} support vector values for {n_vectors} vectors")
        self.op, self.kind = op, kernel_type
        self.gamma, self.coef0, self.degree = float(params[0]), float(params[1]), int(params[2])
        self.vectors = vectors.reshape(n_vectors, -1)
        self.square_norms = np.square(self.vectors).sum(axis=1)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if x.shape[1] != self.vectors.shape[1]:
            raise RtdError(Code.E_INPUT_INVALID, f"{self.op}: the support vectors have {self.vectors.shape[1]} "
                           f"features, the input {x.shape[1]}")
        x = x.astype(np.float64)
        dot = x @ self.vectors.T
        if self.kind == "LINEAR":
            return dot
        if self.kind == "POLY":
            return (self.gamma * dot + self.coef0) ** self.degree
        if self.kind == "SIGMOID":
            return np.tanh(self.gamma * dot + self.coef0)
        distance = np.maximum(np.square(x).sum(axis=1, keepdims=True) + self.square_norms - 2 * dot, 0)
        return np.exp(-self.gamma * distance)
