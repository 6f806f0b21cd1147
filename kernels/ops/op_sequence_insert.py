"""SequenceInsert: a new sequence with the tensor inserted at pos (default: appended)."""
from ._sequence import position
from .base import Kernel


class SequenceInsert_11(Kernel):
    def run(self, sequence, tensor, pos=None):
        out = list(sequence)
        at = len(out) if pos is None else position(self, pos, len(out), "SequenceInsert", inserting=True)
        out.insert(at, tensor)
        return (out,)
