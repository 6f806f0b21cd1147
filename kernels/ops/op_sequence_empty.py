"""SequenceEmpty: a sequence with no tensors (a Python list)."""
from .base import Kernel


class SequenceEmpty_11(Kernel):
    attributes = {"dtype": None}

    def run(self):
        return ([],)
