"""MaxPool: windowed maximum with pads, strides, dilations, ceil_mode and the optional Indices output."""
from ._pool import POOL_ATTRIBUTES, max_pool
from .base import Kernel


class MaxPool_1(Kernel):
    """Indices cost about twice the pool itself, so they are computed only when the node may use
    them: from opset 8 on, unless whoever builds the kernel sets `n_outputs` (the number of
    outputs the node names) to 1."""

    attributes = POOL_ATTRIBUTES
    n_outputs = 2

    def run(self, x):
        a = self.__dict__
        y, indices = max_pool(self.xp, x, self.kernel_shape, self.strides, a.get("dilations"), self.pads,
                              self.auto_pad, a.get("ceil_mode", 0), a.get("storage_order", 0),
                              want_indices=self.since >= 8 and self.n_outputs > 1)
        return (y,) if indices is None else (y, indices)


class MaxPool_8(MaxPool_1):
    """Adds the Indices output and storage_order."""

    attributes = {**POOL_ATTRIBUTES, "storage_order": 0}


class MaxPool_10(MaxPool_1):
    """Adds ceil_mode and dilations."""

    attributes = {**POOL_ATTRIBUTES, "storage_order": 0, "ceil_mode": 0, "dilations": None}
