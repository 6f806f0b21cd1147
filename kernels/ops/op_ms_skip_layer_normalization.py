"""com.microsoft SkipLayerNormalization: LayerNorm(input + skip + bias) * gamma + beta over the last axis;
optional outputs are the mean, the inverse std and the summed input."""
from ._contrib import MsKernel
from ._norm import standardize


class SkipLayerNormalization_1(MsKernel):
    attributes = {"epsilon": 1e-12}

    def run(self, x, skip, gamma, beta=None, bias=None):
        total = x + skip
        if bias is not None:
            total += bias
        y, mean, inv_std = standardize(self.xp, total, (-1,), self.epsilon, x.dtype)
        y *= gamma
        if beta is not None:
            y += beta
        return y.astype(x.dtype, copy=False), mean, inv_std, total
