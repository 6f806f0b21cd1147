"""ReverseSequence: reverse the first sequence_lens[b] steps along the time axis of each batch row."""
from .base import Kernel


class ReverseSequence_10(Kernel):
    attributes = {"batch_axis": 1, "time_axis": 0}

    def run(self, x, sequence_lens):
        xp = self.xp
        moved = xp.moveaxis(x, (self.batch_axis, self.time_axis), (0, 1))
        steps = xp.arange(moved.shape[1])[None, :]
        lens = sequence_lens.astype(xp.int64)[:, None]
        source = xp.where(steps < lens, lens - 1 - steps, steps)
        source = source.reshape(source.shape + (1,) * (moved.ndim - 2))
        out = xp.take_along_axis(moved, source, axis=1)
        return (xp.moveaxis(out, (0, 1), (self.batch_axis, self.time_axis)),)
