"""BatchNormalization: inference folds scale/var into one multiply-add; training mode uses batch statistics."""
import numpy as np

from .base import Kernel


def inference_affine(xp, scale, bias, mean, var, epsilon: float, dtype):
    """Inference's y = x * a + b per channel: (a, b) in x's dtype, a's square root taken in float64 (the compile-time
    rewrite into Mul and Add, kernels/lower/patterns.py, uses the same two constants)."""
    a = (scale / xp.sqrt(var.astype(np.float64) + epsilon)).astype(dtype)
    return a, (bias - mean * a).astype(dtype)


class BatchNormalization_1(Kernel):
    """Opsets 1-13: `is_test`/`spatial` are legacy flags; only inference is computed when is_test is set."""

    attributes = {"epsilon": 1e-5, "momentum": 0.9, "is_test": 0, "spatial": 1, "consumed_inputs": None}

    def training(self) -> bool:
        return False

    def run(self, x, scale, bias, mean, var):
        shape = (1, -1) + (1,) * (x.ndim - 2)
        if self.training():
            axes = (0,) + tuple(range(2, x.ndim))
            batch_mean, batch_var = x.mean(axis=axes), x.var(axis=axes)
            y = self.affine(x, scale, bias, batch_mean, batch_var, shape)
            momentum = x.dtype.type(self.momentum)
            running_mean = (mean * momentum + batch_mean * (1 - momentum)).astype(x.dtype)
            running_var = (var * momentum + batch_var * (1 - momentum)).astype(x.dtype)
            return y, running_mean, running_var
        return (self.affine(x, scale, bias, mean, var, shape),)

    def affine(self, x, scale, bias, mean, var, shape):
        xp = self.xp
        a, b = inference_affine(xp, scale, bias, mean, var, self.epsilon, x.dtype)
        y = xp.multiply(x, a.reshape(shape))
        y += b.reshape(shape)
        return y


class BatchNormalization_7(BatchNormalization_1):
    attributes = {"epsilon": 1e-5, "momentum": 0.9, "spatial": 1}


class BatchNormalization_9(BatchNormalization_1):
    attributes = {"epsilon": 1e-5, "momentum": 0.9}


class BatchNormalization_14(BatchNormalization_1):
    """Adds training_mode: batch statistics plus updated running mean and variance outputs."""

    attributes = {"epsilon": 1e-5, "momentum": 0.9, "training_mode": 0}

    def training(self) -> bool:
        return bool(self.training_mode)
