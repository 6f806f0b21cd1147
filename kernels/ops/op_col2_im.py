"""Col2Im: sum sliding blocks (columns of [N, C*prod(block), L]) back into an image [N, C, *image].

Loops over the block's taps (few), each adding one strided slab, rather than over positions.
"""
import itertools
import math

from rtd.errors import Code, RtdError

from .base import Kernel


class Col2Im_18(Kernel):
    attributes = {"dilations": None, "pads": None, "strides": None}

    def run(self, x, image_shape, block_shape):
        image, block = self.host(image_shape).tolist(), self.host(block_shape).tolist()
        nd = len(image)
        dilations = self.dilations or [1] * nd
        strides = self.strides or [1] * nd
        pads = self.pads or [0] * (2 * nd)
        padded = [image[d] + pads[d] + pads[d + nd] for d in range(nd)]
        counts = [(padded[d] - dilations[d] * (block[d] - 1) - 1) // strides[d] + 1 for d in range(nd)]
        n, cols, positions = x.shape
        if cols % math.prod(block) or positions != math.prod(counts):
            raise RtdError(Code.E_INPUT_INVALID, f"Col2Im: input {x.shape} does not match block {block} over image {image}")
        channels = cols // math.prod(block)
        patches = x.reshape(n, channels, *block, *counts)
        out = self.xp.zeros((n, channels, *padded), dtype=x.dtype)
        for tap in itertools.product(*(range(k) for k in block)):
            where = tuple(slice(t * dil, t * dil + s * (c - 1) + 1, s) for t, dil, s, c in zip(tap, dilations, strides, counts))
            out[(slice(None), slice(None), *where)] += patches[(slice(None), slice(None), *tap)]
        crop = tuple(slice(pads[d], pads[d] + image[d]) for d in range(nd))
        return (out[(slice(None), slice(None), *crop)],)
