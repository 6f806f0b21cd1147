"""The signal ops' shared pieces (DFT, STFT): complex tensors as ONNX spells them, a trailing
axis of 1 (real) or 2 (real, imaginary), to and from NumPy complex arrays, and the FFT itself.

The signal ops run on the host, in a GPU plan too (speech front-ends: small tensors, once per
request): a confined worker cannot load cuFFT at first use, and the warm-up does not load it.
Transforms run in complex64 for float32 input and complex128 for float64 (NumPy 2's pocketfft
keeps single precision); float16 and bfloat16 go through float32 and are rounded back at the end.
"""
import numpy as np

from rtd.errors import Code, RtdError


def compute_dtype(dtype) -> np.dtype:
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


def unpack(x, op: str):
    """[..., 1] as a real array, [..., 2] as a complex one (a view where the layout allows)."""
    if x.ndim < 2 or x.shape[-1] not in (1, 2):
        raise RtdError(Code.E_INPUT_INVALID, f"{op}: the last axis must be 1 (real) or 2 (complex), got shape {list(x.shape)}")
    x = np.ascontiguousarray(x.astype(compute_dtype(x.dtype), copy=False))
    if x.shape[-1] == 1:
        return x[..., 0]
    return x.view(np.complex128 if x.dtype == np.float64 else np.complex64)[..., 0]


def pack(z, dtype):
    """A complex array as [..., 2] of `dtype` (a real one as [..., 1])."""
    if z.dtype.kind != "c":
        return z[..., None].astype(dtype, copy=False)
    return np.ascontiguousarray(z).view(z.real.dtype).reshape(*z.shape, 2).astype(dtype, copy=False)


def transform(z, n: int, axis: int, inverse: bool, onesided: bool, op: str):
    """The DFT of `z` along `axis` at length `n` (cropped or zero-padded): fft/ifft, or with
    `onesided` rfft (real input) / irfft (one-sided complex input, real output)."""
    if n < 1:
        raise RtdError(Code.E_INPUT_INVALID, f"{op}: dft_length {n} must be positive")
    real = z.dtype.kind != "c"
    if onesided and not inverse:
        if not real:
            raise RtdError(Code.E_INPUT_INVALID, f"{op}: a one-sided forward DFT takes a real input ([..., 1])")
        return np.fft.rfft(z, n=n, axis=axis)
    if onesided:
        if real:
            raise RtdError(Code.E_INPUT_INVALID, f"{op}: a one-sided inverse DFT takes a complex input ([..., 2])")
        return np.fft.irfft(z, n=n, axis=axis)
    return (np.fft.ifft if inverse else np.fft.fft)(z, n=n, axis=axis)


def scalar(kernel, x, op: str, what: str) -> int:
    """A scalar integer input (dft_length, frame_step, axis) on the host."""
    value = kernel.host(x).reshape(-1)
    if value.size != 1 or value.dtype.kind not in "iu":
        raise RtdError(Code.E_INPUT_INVALID, f"{op}: {what} must be one integer, got {value.size} of {value.dtype}")
    return int(value[0])
