"""RoiAlign: average (or max) of bilinear samples on a regular grid inside each region's bins.

Per region the sample grid is separable, so rows and columns are gathered once with `np.ix_`
and the four bilinear corners are combined for all channels at once.
"""
import math

import numpy as np

from .base import Kernel


def _axis_samples(start, bin_size, bins, grid, limit):
    """Sample positions along one axis -> (low index, high index, low weight, high weight, valid)."""
    t = start + np.arange(bins)[:, None] * bin_size + (np.arange(grid)[None, :] + 0.5) * bin_size / grid
    t = t.reshape(-1)
    valid = (t >= -1.0) & (t <= limit)
    t = np.maximum(t, 0.0)
    low = np.minimum(t.astype(np.int64), limit - 1)
    high = np.minimum(low + 1, limit - 1)
    t = np.where(low >= limit - 1, low, t)
    frac = t - low
    return low, high, np.where(valid, 1 - frac, 0.0), np.where(valid, frac, 0.0)


class RoiAlign_10(Kernel):
    attributes = {"mode": "avg", "output_height": 1, "output_width": 1, "sampling_ratio": 0, "spatial_scale": 1.0}
    half_pixel = False

    def run(self, x, rois, batch_indices):
        xh, rois, batch_indices = self.host(x), self.host(rois), self.host(batch_indices)
        n_rois, c = rois.shape[0], x.shape[1]
        height, width = x.shape[2:]
        ph, pw = self.output_height, self.output_width
        y = np.zeros((n_rois, c, ph, pw), x.dtype)
        offset = 0.5 if self.half_pixel else 0.0
        for r in range(n_rois):
            x1, y1, x2, y2 = rois[r].astype(np.float64) * self.spatial_scale - offset
            roi_w, roi_h = x2 - x1, y2 - y1
            if not self.half_pixel:
                roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
            gh = self.sampling_ratio or math.ceil(roi_h / ph)
            gw = self.sampling_ratio or math.ceil(roi_w / pw)
            ylo, yhi, wyl, wyh = _axis_samples(y1, roi_h / ph, ph, gh, height)
            xlo, xhi, wxl, wxh = _axis_samples(x1, roi_w / pw, pw, gw, width)
            plane = xh[int(batch_indices[r])].astype(np.float64)
            corners = [(plane[:, ya][:, :, xa] * (wy[:, None] * wx[None, :]))
                       for ya, wy in ((ylo, wyl), (yhi, wyh)) for xa, wx in ((xlo, wxl), (xhi, wxh))]
            if self.mode == "max":
                samples = np.maximum.reduce(corners).reshape(c, ph, gh, pw, gw)
                y[r] = samples.max(axis=(2, 4))
            else:
                samples = sum(corners).reshape(c, ph, gh, pw, gw)
                y[r] = samples.sum(axis=(2, 4)) / max(gh * gw, 1)
        return (self.xp.asarray(y),)


class RoiAlign_16(RoiAlign_10):
    """Adds coordinate_transformation_mode, whose default becomes half_pixel."""

    attributes = {**RoiAlign_10.attributes, "coordinate_transformation_mode": "half_pixel"}

    def setup(self):
        self.half_pixel = self.coordinate_transformation_mode == "half_pixel"
