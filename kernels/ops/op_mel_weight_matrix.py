"""MelWeightMatrix: [dft_length // 2 + 1, num_mel_bins] triangular filters that map a one-sided
linear spectrum onto the mel scale, mel(f) = 2595 log10(1 + f / 700), each peaking at 1.

The num_mel_bins + 2 band edges are spaced evenly in mel from lower_edge_hertz, a step of
(mel(upper) - mel(lower)) / (num_mel_bins + 2), and snapped to spectrogram bins as
floor((dft_length + 1) * f / sample_rate); filter i rises from edge i to edge i + 1 (exactly 1
there, also when the two coincide) and falls to 0 at edge i + 2, as onnx.reference and
onnxruntime compute it.
"""
import numpy as np
from onnx import helper

from rtd.errors import Code, RtdError

from ._spectral import scalar
from .base import Kernel


class MelWeightMatrix_17(Kernel):
    attributes = {"output_datatype": 1}

    def run(self, num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz):
        bands = scalar(self, num_mel_bins, "MelWeightMatrix", "num_mel_bins")
        n_fft = scalar(self, dft_length, "MelWeightMatrix", "dft_length")
        rate = scalar(self, sample_rate, "MelWeightMatrix", "sample_rate")
        low, high = (self.host(v).reshape(-1)[0] for v in (lower_edge_hertz, upper_edge_hertz))
        if bands < 1 or n_fft < 1 or rate < 1 or not 0 <= low <= high:
            raise RtdError(Code.E_INPUT_INVALID, f"MelWeightMatrix: {bands} bands, dft_length {n_fft}, rate {rate}, "
                                                 f"edges {float(low)}..{float(high)} Hz")
        low_mel, high_mel = (2595 * np.log1p(f / 700) / np.log(10) for f in (low, high))
        mels = np.arange(bands + 2) * ((high_mel - low_mel) / (bands + 2)) + low_mel
        edges = ((n_fft + 1) * (700 * np.expm1(mels / 2595 * np.log(10))) // rate).astype(np.int64)
        left, center, right = edges[:-2], edges[1:-1], edges[2:]
        j = np.arange(n_fft // 2 + 1)[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            rising = np.where(center == left, 1.0, (j - left) / (center - left))
            falling = (right - j) / (right - center)
        weights = np.where((j >= left) & (j <= center), rising, np.where((j > center) & (j < right), falling, 0.0))
        return (self.xp.asarray(weights.astype(helper.tensor_dtype_to_np_dtype(self.output_datatype))),)
