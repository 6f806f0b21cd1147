"""Scatter (deprecated at 11): the old name of ScatterElements without reductions."""
from ._scatter import scatter_elements
from .base import Kernel


class Scatter_9(Kernel):
    attributes = {"axis": 0}

    def run(self, data, indices, updates):
        return (scatter_elements(self.xp, data, indices, updates, self.axis, "none"),)
