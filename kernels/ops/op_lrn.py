"""LRN: local response normalization across channels, x / (bias + alpha/size * sum of squares)^beta."""
from .base import REQUIRED, Kernel


class LRN_1(Kernel):
    attributes = {"alpha": 1e-4, "beta": 0.75, "bias": 1.0, "size": REQUIRED}

    def run(self, x):
        xp = self.xp
        c = x.shape[1]
        sq = xp.square(x)
        before, after = (self.size - 1) // 2, self.size - 1 - (self.size - 1) // 2
        total = xp.zeros_like(x)
        for shift in range(-before, after + 1):  # one shifted add per window offset, not per channel
            lo, hi = max(0, -shift), min(c, c - shift)
            total[:, lo:hi] += sq[:, lo + shift:hi + shift]
        total *= x.dtype.type(self.alpha / self.size)
        total += x.dtype.type(self.bias)
        return ((x / total ** x.dtype.type(self.beta)).astype(x.dtype, copy=False),)
