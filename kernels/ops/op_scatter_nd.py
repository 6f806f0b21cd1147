"""ScatterND: copy of data with update slices written at index tuples; reductions from 16/18."""
from ._scatter import check_reduction, scatter_nd
from .base import Kernel


class ScatterND_11(Kernel):
    reduction = "none"
    allowed = ("none",)

    def setup(self):
        check_reduction("ScatterND", self.reduction, self.allowed)

    def run(self, data, indices, updates):
        return (scatter_nd(self.xp, data, indices, updates, self.reduction),)


class ScatterND_16(ScatterND_11):
    attributes = {"reduction": "none"}
    allowed = ("none", "add", "mul")


class ScatterND_18(ScatterND_16):
    allowed = ("none", "add", "mul", "max", "min")
