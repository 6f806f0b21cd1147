"""AveragePool: windowed mean; pads count only with count_include_pad, ceil overhang never does."""
from ._pool import POOL_ATTRIBUTES, sum_pool
from .base import Kernel


class AveragePool_1(Kernel):
    attributes = POOL_ATTRIBUTES

    def run(self, x):
        a = self.__dict__
        return (sum_pool(self.xp, x, self.kernel_shape, self.strides, a.get("dilations"), self.pads,
                         self.auto_pad, a.get("ceil_mode", 0), a.get("count_include_pad", 0)),)


class AveragePool_7(AveragePool_1):
    attributes = {**POOL_ATTRIBUTES, "count_include_pad": 0}


class AveragePool_10(AveragePool_1):
    attributes = {**POOL_ATTRIBUTES, "count_include_pad": 0, "ceil_mode": 0}


class AveragePool_19(AveragePool_1):
    attributes = {**POOL_ATTRIBUTES, "count_include_pad": 0, "ceil_mode": 0, "dilations": None}
