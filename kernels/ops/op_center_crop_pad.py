"""CenterCropPad: crop or zero-pad each listed axis to the target size, keeping the centre."""
from ._axes import dims, normalize_axes
from .base import Kernel


class CenterCropPad_18(Kernel):
    attributes = {"axes": None}

    def run(self, x, shape):
        target = dims(self.host(shape), "CenterCropPad")
        axes = range(x.ndim) if self.axes is None else normalize_axes(self.axes, x.ndim, "CenterCropPad")
        crop = [slice(None)] * x.ndim
        place = [slice(None)] * x.ndim
        out_shape = list(x.shape)
        for axis, size in zip(axes, target):
            dim = x.shape[axis]
            out_shape[axis] = size
            if size < dim:  # the extra element of an odd difference goes to the end, as in the spec
                start = (dim - size) // 2
                crop[axis] = slice(start, start + size)
            elif size > dim:
                start = (size - dim) // 2
                place[axis] = slice(start, start + dim)
        out = self.xp.zeros(out_shape, dtype=x.dtype)
        out[tuple(place)] = x[tuple(crop)]
        return (out,)
