"""ScatterElements: copy of data with updates written along `axis`; reductions from opset 16/18."""
from ._scatter import check_reduction, scatter_elements
from .base import Kernel


class ScatterElements_11(Kernel):
    attributes = {"axis": 0}
    reduction = "none"
    allowed = ("none",)

    def setup(self):
        check_reduction("ScatterElements", self.reduction, self.allowed)

    def run(self, data, indices, updates):
        return (scatter_elements(self.xp, data, indices, updates, self.axis, self.reduction),)


class ScatterElements_16(ScatterElements_11):
    attributes = {"axis": 0, "reduction": "none"}
    allowed = ("none", "add", "mul")


class ScatterElements_18(ScatterElements_16):
    allowed = ("none", "add", "mul", "max", "min")
