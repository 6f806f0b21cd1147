"""GroupNormalization: standardize channel groups over (C/groups, *spatial), then scale and bias."""
from ._norm import standardize, stash_type
from .base import Kernel


class GroupNormalization_18(Kernel):
    """Opset 18: scale and bias hold one value per group."""

    attributes = {"epsilon": 1e-5, "num_groups": 0}
    per_channel = False

    def run(self, x, scale, bias):
        n, c = x.shape[:2]
        g = self.num_groups
        grouped = x.reshape((n, g, -1))
        y, _, _ = standardize(self.xp, grouped, (2,), self.epsilon, stash_type(self.__dict__.get("stash_type", 1)))
        y = y.reshape(x.shape)
        if not self.per_channel:
            scale, bias = scale.repeat(c // g), bias.repeat(c // g)
        shape = (1, c) + (1,) * (x.ndim - 2)
        y *= scale.reshape(shape)
        y += bias.reshape(shape)
        return (y.astype(x.dtype, copy=False),)


class GroupNormalization_21(GroupNormalization_18):
    """Opset 21: scale and bias hold one value per channel; stash_type picks the compute precision."""

    attributes = {"epsilon": 1e-5, "num_groups": 0, "stash_type": 1}
    per_channel = True
