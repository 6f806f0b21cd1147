"""SequenceErase: a new sequence without the tensor at pos (default: the last)."""
from ._sequence import position
from .base import Kernel


class SequenceErase_11(Kernel):
    def run(self, sequence, pos=None):
        out = list(sequence)
        del out[-1 if pos is None else position(self, pos, len(out), "SequenceErase")]
        return (out,)
