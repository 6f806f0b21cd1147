"""OptionalGetElement: the value inside an optional (a plain tensor or sequence passes through)."""
from rtd.errors import Code, RtdError

from .base import Kernel


class OptionalGetElement_15(Kernel):
    def run(self, optional):
        if optional is None:
            raise RtdError(Code.E_INPUT_INVALID, "OptionalGetElement: the optional is empty")
        return (optional,)
