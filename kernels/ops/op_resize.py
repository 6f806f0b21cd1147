"""Resize: nearest / linear / cubic resampling of any axes (see _resize for the arithmetic).

Versions: 10 (scales input, asymmetric coordinates; nearest rounds down when enlarging and
up when shrinking, as onnxruntime does), 11 (roi,
sizes, coordinate transforms, cubic), 13 (roi and scales optional), 18 (antialias, axes,
keep_aspect_ratio_policy), 19 (half_pixel_symmetric). tf_half_pixel_for_nn exists at 11 and 12 only.
"""
from rtd.errors import Code, RtdError

from ._axes import normalize_axes
from ._resize import ASPECT_POLICIES, HALF_PIXEL_SYMMETRIC, MODES, NEAREST_MODES, TF_HALF_PIXEL, TRANSFORMS, resize
from .base import Kernel


class Resize_10(Kernel):
    attributes = {"mode": "nearest"}

    def setup(self):
        if self.mode not in ("nearest", "linear"):
            raise RtdError(Code.E_OP_UNSUPPORTED, f"Resize-10: mode {self.mode!r}")

    def geometry(self, ndim: int, scales) -> dict:
        """resize's keywords for an x of `ndim` axes and these inputs (planning reads them from constants)."""
        return dict(mode=self.mode, scales=self.host(scales).tolist(), transform="asymmetric", nearest_mode="floor_up_ceil_down")

    def run(self, x, scales):
        return (resize(self.xp, x, **self.geometry(x.ndim, scales)),)


class Resize_11(Kernel):
    attributes = {"mode": "nearest", "coordinate_transformation_mode": "half_pixel", "cubic_coeff_a": -0.75,
                  "exclude_outside": 0, "extrapolation_value": 0.0, "nearest_mode": "round_prefer_floor"}
    transforms = (*TRANSFORMS, TF_HALF_PIXEL)
    antialias, axes, keep_aspect_ratio_policy = 0, None, "stretch"

    def setup(self):
        for name, allowed in (("mode", MODES), ("coordinate_transformation_mode", self.transforms),
                              ("nearest_mode", NEAREST_MODES), ("keep_aspect_ratio_policy", ASPECT_POLICIES)):
            if getattr(self, name) not in allowed:
                raise RtdError(Code.E_OP_UNSUPPORTED, f"Resize-{self.since}: {name} {getattr(self, name)!r}")

    def geometry(self, ndim: int, roi=None, scales=None, sizes=None) -> dict:
        """resize's keywords for an x of `ndim` axes and these inputs (planning reads them from constants)."""
        scales = None if scales is None or scales.size == 0 else self.host(scales).tolist()
        sizes = None if sizes is None or sizes.size == 0 else self.host(sizes).tolist()
        if (scales is None) == (sizes is None):
            raise RtdError(Code.E_INPUT_INVALID, "Resize: exactly one of scales and sizes must be given")
        axes = None if self.axes is None else normalize_axes(self.axes, ndim, "Resize")
        return dict(mode=self.mode, scales=scales, sizes=sizes, roi=None if roi is None else self.host(roi).astype(float),
                    axes=axes, transform=self.coordinate_transformation_mode, nearest_mode=self.nearest_mode,
                    cubic_a=self.cubic_coeff_a, exclude_outside=self.exclude_outside,
                    extrapolation_value=self.extrapolation_value, policy=self.keep_aspect_ratio_policy,
                    antialias=self.antialias)

    def run(self, x, roi=None, scales=None, sizes=None):
        return (resize(self.xp, x, **self.geometry(x.ndim, roi, scales, sizes)),)


class Resize_13(Resize_11):
    """roi and scales became optional inputs (Resize_11.run already treats them so);
    tf_half_pixel_for_nn was dropped."""

    transforms = TRANSFORMS


class Resize_18(Resize_13):
    attributes = {**Resize_11.attributes, "antialias": 0, "axes": None, "keep_aspect_ratio_policy": "stretch"}


class Resize_19(Resize_18):
    transforms = (*TRANSFORMS, HALF_PIXEL_SYMMETRIC)
