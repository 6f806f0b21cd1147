"""GridSample: sample x (N, C, *S) at normalized grid points, nearest/linear/cubic over any rank.

Vectorized over every output point: per spatial axis the coordinate is denormalized, taken back
inside the borders (border / reflection), and split into taps with weights; the taps of all axes
combine as an outer product of gathers from a channels-last view of x.
"""
import itertools

import numpy as np

from rtd.errors import Code, RtdError

from .base import Kernel

_MODES = {"bilinear": "linear", "linear": "linear", "nearest": "nearest", "bicubic": "cubic", "cubic": "cubic"}
_CUBIC_A = -0.75


def _reflect(v, lo, hi):
    span = hi - lo
    below, above = v < lo, v > hi
    d = np.where(below, lo - v, np.where(above, v - hi, 0.0))
    n = np.floor(d / span)
    r = d - n * span
    even = n % 2 == 0
    out = np.where(below, np.where(even, lo + r, hi - r), v)
    return np.where(above, np.where(even, hi - r, lo + r), out)


def _cubic_weights(t):
    a = _CUBIC_A
    return [((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a,
            ((a + 2) * t - (a + 3)) * t * t + 1,
            ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1,
            ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a]


class GridSample_16(Kernel):
    attributes = {"align_corners": 0, "mode": "bilinear", "padding_mode": "zeros"}

    def setup(self):
        if self.mode not in _MODES or self.padding_mode not in ("zeros", "border", "reflection"):
            raise RtdError(Code.E_OP_UNSUPPORTED, f"GridSample mode {self.mode!r} / padding {self.padding_mode!r}")
        self.kind = _MODES[self.mode]

    def axis_taps(self, g, size):
        """[(index, weight, inside)] taps along one axis for normalized coordinates g."""
        if self.align_corners:
            v, lo, hi = (g + 1) / 2 * (size - 1), 0.0, size - 1.0
        else:
            v, lo, hi = ((g + 1) * size - 1) / 2, -0.5, size - 0.5
        if self.kind == "nearest":
            v = np.rint(v)
        if self.padding_mode == "border":
            v = np.where((v < lo) | (v > hi), np.clip(v, 0, size - 1), v)
        elif self.padding_mode == "reflection":
            v = _reflect(v, lo, hi)
        if self.kind == "nearest":
            starts, weights = [v.astype(np.int64)], [np.ones_like(v)]
        else:
            base = np.floor(v)
            t = v - base
            if self.kind == "linear":
                starts, weights = [base, base + 1], [1 - t, t]
            else:
                starts, weights = [base - 1, base, base + 1, base + 2], _cubic_weights(t)
            starts = [s.astype(np.int64) for s in starts]
        taps = []
        for i, w in zip(starts, weights):
            if self.padding_mode == "zeros":
                inside = (i >= 0) & (i < size)
                taps.append((np.clip(i, 0, size - 1), np.where(inside, w, 0.0)))
            elif self.padding_mode == "border":
                taps.append((np.clip(i, 0, size - 1), w))
            else:
                taps.append((_reflect(i.astype(np.float64), lo, hi).astype(np.int64), w))
        return taps

    def run(self, x, grid):
        xh, g = self.host(x), self.host(grid).astype(np.float64)
        spatial = xh.shape[2:]
        nd = len(spatial)
        channels_last = np.moveaxis(xh, 1, -1)
        batch = np.arange(xh.shape[0]).reshape((-1,) + (1,) * nd)
        per_axis = [self.axis_taps(g[..., nd - 1 - a], spatial[a]) for a in range(nd)]
        y = np.zeros(g.shape[:-1] + (xh.shape[1],), np.float64)
        for combo in itertools.product(*per_axis):
            weight = np.prod([w for _, w in combo], axis=0)
            y += channels_last[(batch,) + tuple(i for i, _ in combo)] * weight[..., None]
        return (self.xp.asarray(np.moveaxis(y, -1, 1).astype(x.dtype)),)


class GridSample_20(GridSample_16):
    """Opset 20 renames the modes linear/cubic and allows any spatial rank."""

    attributes = {"align_corners": 0, "mode": "linear", "padding_mode": "zeros"}
