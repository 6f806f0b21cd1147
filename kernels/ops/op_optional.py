"""Optional: wrap a value (or nothing, given only the `type` attribute) as an optional."""
from .base import Kernel


class Optional_15(Kernel):
    attributes = {"type": None}

    def run(self, value=None):
        return (value,)
