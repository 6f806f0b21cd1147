"""ConvTranspose: the gradient of Conv, computed as one GEMM (W^T @ X) then a col2im scatter-add per tap;
where the taps cannot overlap (kernel = stride, no dilation, padding or extra output: a detector head's 2x
upsampling) each output row is written once: by native/tiles.c for a 2-d float32 one without groups, else from
the GEMM's columns, placed by one strided copy per tap."""
import numpy as np

from ..native.tiles import conv_transpose_tiles
from .base import Kernel


class ConvTranspose_1(Kernel):
    attributes = {"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None,
                  "output_padding": None, "output_shape": None, "pads": None, "strides": None}

    def geometry(self, spatial, kernel):
        nd = len(spatial)
        strides = list(self.strides or [1] * nd)
        dilations = list(self.dilations or [1] * nd)
        extra = list(self.output_padding or [0] * nd)
        full = [s * (i - 1) + e + (k - 1) * d + 1 for i, s, e, k, d in zip(spatial, strides, extra, kernel, dilations)]
        if self.output_shape is not None or self.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            if self.output_shape is not None:
                out = list(self.output_shape[-nd:])
            else:
                out = [i * s for i, s in zip(spatial, strides)]
            total = [f - o for f, o in zip(full, out)]
            upper = self.auto_pad == "SAME_UPPER"
            begin = [t // 2 if upper else t - t // 2 for t in total]
        else:
            pads = list(self.pads or [0] * 2 * nd) if self.auto_pad != "VALID" else [0] * 2 * nd
            begin = pads[:nd]
            out = [f - b - e for f, b, e in zip(full, pads[:nd], pads[nd:])]
        return strides, dilations, full, begin, out

    def run(self, x, w, b=None):
        xp = self.xp
        n, c = x.shape[:2]
        g = self.group
        mg = w.shape[1]
        kernel = list(self.kernel_shape or w.shape[2:])
        nd = len(kernel)
        spatial = x.shape[2:]
        strides, dilations, full, begin, out = self.geometry(spatial, kernel)
        tiles = kernel == strides and all(d == 1 for d in dilations) and not any(begin) \
            and out == full == [i * s for i, s in zip(spatial, strides)]
        if tiles and xp is np and g == 1 and nd == 2 and kernel == list(w.shape[2:]) \
                and (y := conv_transpose_tiles(x, w, b)) is not None:
            return (y,)
        pixels = int(np.prod(spatial))
        kk = int(np.prod(kernel))
        cols = xp.matmul(w.reshape(g, c // g, mg * kk).transpose(0, 2, 1), x.reshape(n, g, c // g, pixels))
        cols = cols.reshape((n, g * mg) + tuple(kernel) + tuple(spatial))
        if tiles:
            # output pixel i*k + t is tap t of input pixel i: each tap's plane goes to a strided view of y, bias
            # added on the way (one transposing copy of the 2k-dimensional view ran an inner loop of k floats:
            # 2-5x slower on a 2x2 upsampling)
            y = xp.empty((n, g * mg) + tuple(out), x.dtype)
            bias = None if b is None else b.reshape((1, -1) + (1,) * nd)
            for offset in np.ndindex(*kernel):
                tap, view = cols[(slice(None), slice(None)) + offset], y[(slice(None), slice(None)) + tuple(
                    slice(t, None, s) for t, s in zip(offset, strides))]
                if bias is None:
                    view[...] = tap
                else:
                    xp.add(tap, bias, out=view)
            return (y,)
        size = [max(f, bg + o) for f, bg, o in zip(full, begin, out)]
        y = xp.zeros((n, g * mg) + tuple(size), x.dtype)
        for offset in np.ndindex(*kernel):
            index = (slice(None), slice(None)) + tuple(
                slice(t * d, t * d + (i - 1) * s + 1, s) for t, d, s, i in zip(offset, dilations, strides, spatial))
            y[index] += cols[(slice(None), slice(None)) + offset]
        y = y[(slice(None), slice(None)) + tuple(slice(bg, bg + o) for bg, o in zip(begin, out))]
        if b is not None:
            y = y + b.reshape((1, -1) + (1,) * nd)
        return (xp.ascontiguousarray(y),)
