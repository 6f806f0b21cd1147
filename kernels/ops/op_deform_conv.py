"""DeformConv (2-D): convolution whose kernel taps move by learned offsets (and are scaled by an
optional mask); a bilinear "deformable im2col" gathers every tap at once, then one grouped GEMM."""
import numpy as np

from rtd.errors import Code, RtdError

from .base import Kernel


class DeformConv_19(Kernel):
    attributes = {"dilations": None, "group": 1, "kernel_shape": None, "offset_group": 1, "pads": None,
                  "strides": None}

    def run(self, x, w, offset, b=None, mask=None):
        xh, w, offset = self.host(x), self.host(w), self.host(offset)
        if xh.ndim != 4:
            raise RtdError(Code.E_OP_UNSUPPORTED, f"DeformConv: only 2-D inputs, got rank {xh.ndim}")
        n, c, height, width = xh.shape
        m = w.shape[0]
        kh, kw = self.kernel_shape or w.shape[2:]
        sh, sw = self.strides or (1, 1)
        dh, dw = self.dilations or (1, 1)
        pads = self.pads or [0, 0, 0, 0]
        og, g = self.offset_group, self.group
        oh, ow = offset.shape[2:]
        off = offset.reshape(n, og, kh, kw, 2, oh, ow).astype(np.float64)
        base_h = (-pads[0] + sh * np.arange(oh))[None, :] + (dh * np.arange(kh))[:, None]  # (kh, oh)
        base_w = (-pads[1] + sw * np.arange(ow))[None, :] + (dw * np.arange(kw))[:, None]  # (kw, ow)
        ys = base_h[None, None, :, None, :, None] + off[:, :, :, :, 0]  # (n, og, kh, kw, oh, ow)
        xs = base_w[None, None, None, :, None, :] + off[:, :, :, :, 1]
        planes = np.moveaxis(xh.reshape(n, og, c // og, height, width), 2, -1).astype(np.float64)
        ni = np.arange(n).reshape(-1, 1, 1, 1, 1, 1)
        gi = np.arange(og).reshape(1, -1, 1, 1, 1, 1)
        y0, x0 = np.floor(ys), np.floor(xs)
        cols = 0.0
        for yy, wy in ((y0, 1 - (ys - y0)), (y0 + 1, ys - y0)):
            for xx, wx in ((x0, 1 - (xs - x0)), (x0 + 1, xs - x0)):
                inside = (yy >= 0) & (yy < height) & (xx >= 0) & (xx < width)
                yi = np.clip(yy, 0, height - 1).astype(np.int64)
                xi = np.clip(xx, 0, width - 1).astype(np.int64)
                cols = cols + planes[ni, gi, yi, xi] * np.where(inside, wy * wx, 0.0)[..., None]
        if mask is not None:
            cols = cols * self.host(mask).reshape(n, og, kh, kw, oh, ow, 1)
        # (n, og, kh, kw, oh, ow, c/og) -> (n, group, c/group * kh * kw, oh * ow)
        cols = np.moveaxis(cols, -1, 2).reshape(n, g, (c // g) * kh * kw, oh * ow)
        y = np.matmul(w.reshape(g, m // g, -1).astype(np.float64), cols).reshape(n, m, oh, ow)
        if b is not None:
            y += self.host(b).reshape(1, -1, 1, 1)
        return (self.xp.asarray(y.astype(x.dtype)),)
