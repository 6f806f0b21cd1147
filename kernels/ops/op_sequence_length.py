"""SequenceLength: the number of tensors in a sequence, as an int64 scalar."""
import numpy as np

from .base import Kernel


class SequenceLength_11(Kernel):
    def run(self, sequence):
        return (self.xp.asarray(np.array(len(sequence), dtype=np.int64)),)
