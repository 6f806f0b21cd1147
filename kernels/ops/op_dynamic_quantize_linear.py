"""DynamicQuantizeLinear: uint8 quantization with scale and zero point taken from x's range (including 0).

A float32 NumPy array takes quant.c's whole step (native/quant.py), as a compiled plan's program op does;
otherwise np.min and np.max, then four passes in a per-thread float buffer: x / scale, round half to even, saturate
to [-zp, 255 - zp], and +zp written straight into the uint8 result. Both give clip(round(x / scale) + zp, 0, 255), since every
operand after the division is an integer-valued float.
"""
import numpy as np

from ..native import quant
from ._window import scratch
from .base import Kernel


class DynamicQuantizeLinear_11(Kernel):
    def run(self, x):
        xp = self.xp
        compiled = quant.dynamic_quantize(np.ascontiguousarray(x)) if xp is np else None
        if compiled is not None:
            return compiled
        ends = (float(x.min()), float(x.max())) if x.size else (0.0, 0.0)
        x_min, x_max = min(ends[0], 0.0), max(ends[1], 0.0)
        # In float32 steps, as the spec's reference and onnxruntime take them: the range over 255 in float64, rounded
        # once, is an ulp off for about 1 range in 4, and that ulp scales every product downstream
        scale = (np.float32(x_max) - np.float32(x_min)) / np.float32(255)
        zp = int(min(max(np.rint(np.float32(-x_min / scale)), 0.0), 255.0)) if scale else 0  # round, saturate
        zero_point = np.array(zp, np.uint8)
        if not scale:
            return xp.zeros(x.shape, np.uint8), xp.asarray(scale), xp.asarray(zero_point)
        y = xp.empty(x.shape, np.uint8)
        q = xp.divide(x, scale, out=scratch("dynamic-quantize", x.shape, np.float32, xp), dtype=np.float32)
        xp.rint(q, out=q)
        xp.clip(q, -zp, 255 - zp, out=q)
        xp.add(q, zp, out=y, casting="unsafe")
        return y, xp.asarray(scale), xp.asarray(zero_point)
