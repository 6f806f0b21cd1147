"""Range: start, start + delta, ... below limit (above it for a negative delta), in start's type."""
import numpy as np

from rtd.errors import Code, RtdError

from .base import Kernel


class Range_11(Kernel):
    def run(self, start, limit, delta):
        # Feeds may be NumPy scalars rather than 0-d arrays.
        start, limit, delta = (self.host(self.xp.asarray(v)).reshape(()) for v in (start, limit, delta))
        if delta == 0:
            raise RtdError(Code.E_INPUT_INVALID, "Range: delta is 0")
        if start.dtype.kind in "iu":  # Python ints: NumPy's arange on 0-d arrays costs ~5x more
            return (self.xp.arange(start.item(), limit.item(), delta.item(), dtype=start.dtype),)
        return (self.xp.asarray(np.arange(start, limit, delta).astype(start.dtype)),)
