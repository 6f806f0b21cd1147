"""The generalized cosine windows (Hann, Hamming, Blackman) the signal ops build on.

w[n] = a0 - a1 cos(2 pi n / D) + a2 cos(4 pi n / D), D = size (periodic) or size - 1 (symmetric).
"""
import numpy as np
from onnx import helper

from .base import Kernel


class CosineWindow(Kernel):
    attributes = {"output_datatype": 1, "periodic": 1}
    coefficients: tuple[float, float, float]

    def run(self, size):
        n = int(self.host(self.xp.asarray(size)).reshape(-1)[0])
        denominator = n if self.periodic else n - 1
        phase = 2 * np.pi * np.arange(n) / max(denominator, 1)
        a0, a1, a2 = self.coefficients
        window = a0 - a1 * np.cos(phase) + a2 * np.cos(2 * phase)
        return (self.xp.asarray(window.astype(helper.tensor_dtype_to_np_dtype(self.output_datatype))),)
