"""MaxUnpool: scatter pooled values back to their flat Indices in a zero tensor."""
import numpy as np

from .base import Kernel


class MaxUnpool_9(Kernel):
    attributes = {"kernel_shape": None, "pads": None, "strides": None}

    def run(self, x, indices, output_shape=None):
        xp = self.xp
        nd = x.ndim - 2
        strides = self.strides or [1] * nd
        pads = self.pads or [0] * 2 * nd
        inferred = x.shape[:2] + tuple((i - 1) * s + k - pads[a] - pads[a + nd]
                                       for a, (i, s, k) in enumerate(zip(x.shape[2:], strides, self.kernel_shape)))
        y = xp.zeros(int(np.prod(inferred)), x.dtype)
        y[indices.reshape(-1)] = x.reshape(-1)
        y = y.reshape(inferred)
        if output_shape is None:
            return (y,)
        # indices address the inferred shape; a larger requested shape holds it at its origin
        out = xp.zeros(tuple(int(v) for v in self.host(output_shape)), x.dtype)
        out[tuple(slice(0, i) for i in inferred)] = y
        return (out,)
