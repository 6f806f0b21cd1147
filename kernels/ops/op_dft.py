"""DFT: the discrete Fourier transform along one signal axis of a real ([..., 1]) or complex
([..., 2]) tensor, forward or inverse (scaled by 1/n), full or one-sided (RFFT / IRFFT).

`dft_length` crops or zero-pads the axis; by default it is the axis' size, or 2 * (size - 1)
for IRFFT. The axis is an attribute (default 1) up to opset 19 and an input (default -2) from 20;
the trailing real/imaginary axis is never one.
"""
from rtd.errors import Code, RtdError

from ._spectral import pack, scalar, transform, unpack
from .base import Kernel


class DFT_17(Kernel):
    attributes = {"axis": 1, "inverse": 0, "onesided": 0}
    on_device = False   # kernels/ops/_spectral.py says why

    def run(self, x, dft_length=None):
        return (self.dft(x, dft_length, self.axis),)

    def dft(self, x, dft_length, axis: int):
        rank = x.ndim
        if not (-rank <= axis <= -2 or 0 <= axis <= rank - 2):
            raise RtdError(Code.E_MODEL_INVALID, f"DFT: axis {axis} outside [-{rank}, -2] and [0, {rank - 2}]")
        axis %= rank
        z = unpack(x, "DFT")
        if dft_length is not None:
            n = scalar(self, dft_length, "DFT", "dft_length")
        elif self.inverse and self.onesided:
            n = 2 * (x.shape[axis] - 1)
        else:
            n = x.shape[axis]
        return pack(transform(z, n, axis, bool(self.inverse), bool(self.onesided), "DFT"), x.dtype)


class DFT_20(DFT_17):
    attributes = {"inverse": 0, "onesided": 0}

    def run(self, x, dft_length=None, axis=None):
        return (self.dft(x, dft_length, -2 if axis is None else scalar(self, axis, "DFT", "axis")),)
