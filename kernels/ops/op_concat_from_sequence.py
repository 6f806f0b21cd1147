"""ConcatFromSequence: concatenate a sequence's tensors along `axis`, or stack them on a new axis."""
from ._axes import normalize_axis
from .base import REQUIRED, Kernel


class ConcatFromSequence_11(Kernel):
    attributes = {"axis": REQUIRED, "new_axis": 0}

    def run(self, sequence):
        rank = sequence[0].ndim
        if self.new_axis:
            return (self.xp.stack(sequence, axis=normalize_axis(self.axis, rank + 1, "ConcatFromSequence")),)
        return (self.xp.concatenate(sequence, axis=normalize_axis(self.axis, rank, "ConcatFromSequence")),)
