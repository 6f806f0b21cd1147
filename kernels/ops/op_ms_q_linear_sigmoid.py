"""com.microsoft QLinearSigmoid: 8-bit sigmoid through a 256-entry table, as onnxruntime computes it."""
import numpy as np

from ._contrib import QLinearLookup


class QLinearSigmoid_1(QLinearLookup):
    def transform(self, x):
        return (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(np.float32)
