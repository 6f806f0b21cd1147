"""MeanVarianceNormalization: (x - mean) / (std + 1e-9) over `axes`."""
from .base import Kernel


class MeanVarianceNormalization_9(Kernel):
    attributes = {"axes": [0, 2, 3]}

    def run(self, x):
        axes = tuple(self.axes)
        centred = x - x.mean(axis=axes, keepdims=True)
        std = self.xp.sqrt(self.xp.square(centred).mean(axis=axes, keepdims=True))
        std += x.dtype.type(1e-9)
        centred /= std
        return (centred,)
