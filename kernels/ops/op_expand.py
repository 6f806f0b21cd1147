"""Expand: broadcast the input against a shape. Returns a read-only broadcast view (no copy)."""
import numpy as np

from rtd.errors import Code, RtdError

from .base import Kernel


class Expand_8(Kernel):
    def run(self, x, shape):
        try:
            target = np.broadcast_shapes(x.shape, tuple(self.host(shape).tolist()))
        except ValueError:
            raise RtdError(Code.E_INPUT_INVALID, f"Expand: {x.shape} does not broadcast to {self.host(shape).tolist()}") from None
        return (self.xp.broadcast_to(x, target),)
