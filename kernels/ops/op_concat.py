"""Concat along `axis` (negative axes from opset 11 are accepted for every version)."""
from ._axes import normalize_axis
from .base import REQUIRED, Kernel


class Concat_4(Kernel):
    attributes = {"axis": REQUIRED}

    def run(self, *inputs):
        axis = normalize_axis(self.axis, inputs[0].ndim, "Concat")
        return (self.xp.concatenate(inputs, axis=axis),)
