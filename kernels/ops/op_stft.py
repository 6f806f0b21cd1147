"""STFT: the short-time Fourier transform of [batch, length, 1 or 2] signals: frames of
`frame_length` samples every `frame_step`, each multiplied by `window` and transformed.

frames = (length - frame_length) // frame_step + 1. `frame_length` defaults to the window's
length, else to the signal's; the window defaults to all ones. The output is
[batch, frames, bins, 2], bins = frame_length // 2 + 1 when onesided (real signals only).
The frames are a strided view of the signal, so the only copy is the windowed batch of frames.
"""
import numpy as np

from rtd.errors import Code, RtdError

from ._spectral import compute_dtype, pack, scalar, transform, unpack
from .base import Kernel


class STFT_17(Kernel):
    attributes = {"onesided": 1}
    on_device = False   # kernels/ops/_spectral.py says why

    def run(self, signal, frame_step, window=None, frame_length=None):
        if signal.ndim != 3:
            raise RtdError(Code.E_INPUT_INVALID, f"STFT: the signal must be [batch, length, 1 or 2], got shape {list(signal.shape)}")
        step = scalar(self, frame_step, "STFT", "frame_step")
        length = signal.shape[1]
        if frame_length is not None:
            n = scalar(self, frame_length, "STFT", "frame_length")
        else:
            n = length if window is None else window.shape[0]
        if window is not None and (window.ndim != 1 or window.shape[0] != n):
            raise RtdError(Code.E_INPUT_INVALID, f"STFT: window of shape {list(window.shape)} for frame_length {n}")
        if step < 1 or not 1 <= n <= length:
            raise RtdError(Code.E_INPUT_INVALID, f"STFT: frame_length {n} and frame_step {step} for a signal of {length}")
        z = unpack(signal, "STFT")
        frames = np.lib.stride_tricks.sliding_window_view(z, n, axis=1)[:, ::step]   # [batch, frames, n]
        if window is not None:
            frames = frames * window.astype(compute_dtype(signal.dtype), copy=False)
        spectrum = transform(frames, n, -1, False, bool(self.onesided), "STFT")
        return (pack(spectrum, signal.dtype),)
