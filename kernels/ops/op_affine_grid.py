"""AffineGrid: sampling grids (N, *spatial, ndim) in [-1, 1] from affine matrices theta (N, ndim, ndim+1)."""
import numpy as np

from .base import Kernel


def _axis_points(size, align_corners):
    if align_corners:
        return np.linspace(-1.0, 1.0, size) if size > 1 else np.zeros(1)
    return (np.arange(size) * 2.0 + 1.0) / size - 1.0


class AffineGrid_20(Kernel):
    attributes = {"align_corners": 0}

    def run(self, theta, size):
        spatial = [int(v) for v in self.host(size)[2:]]
        axes = [_axis_points(s, self.align_corners) for s in spatial]
        mesh = np.meshgrid(*axes, indexing="ij")  # D, H, W order
        homogeneous = np.stack(list(mesh[::-1]) + [np.ones(spatial)], axis=-1).reshape(-1, len(spatial) + 1)
        xp = self.xp
        grid = xp.matmul(xp.asarray(homogeneous.astype(theta.dtype)), theta.transpose(0, 2, 1))
        return (grid.reshape((theta.shape[0],) + tuple(spatial) + (len(spatial),)),)
