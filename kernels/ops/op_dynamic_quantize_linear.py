"""DynamicQuantizeLinear: uint8 quantization with scale and zero point taken from x's range (including 0)."""
import numpy as np

from ._quant import quantize
from .base import Kernel


class DynamicQuantizeLinear_11(Kernel):
    def run(self, x):
        x_min = min(float(x.min()), 0.0) if x.size else 0.0
        x_max = max(float(x.max()), 0.0) if x.size else 0.0
        scale = np.float32((x_max - x_min) / 255.0)
        zero_point = quantize(np, np.array(-x_min / scale if scale else 0.0, np.float32), None, np.uint8)
        y = quantize(self.xp, x / scale if scale else x * 0, zero_point, np.uint8)
        return y, self.xp.asarray(scale), self.xp.asarray(zero_point)
