"""LpPool: (sum over the window of |x|^p)^(1/p)."""
from ._pool import POOL_ATTRIBUTES, sum_pool
from .base import Kernel


class LpPool_1(Kernel):
    attributes = {**POOL_ATTRIBUTES, "p": 2}

    def run(self, x):
        a = self.__dict__
        return (sum_pool(self.xp, x, self.kernel_shape, self.strides, a.get("dilations"), self.pads,
                         self.auto_pad, a.get("ceil_mode", 0), 0, p=self.p),)


class LpPool_18(LpPool_1):
    """Adds ceil_mode and dilations."""

    attributes = {**POOL_ATTRIBUTES, "p": 2, "ceil_mode": 0, "dilations": None}
