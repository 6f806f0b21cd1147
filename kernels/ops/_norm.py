"""Standardization over some axes, shared by LayerNormalization, GroupNormalization,
InstanceNormalization and the fused LayerNorm step: (x - mean) * 1/sqrt(var + eps), computed
with in-place ops; and the compiled layer normalization of float32 rows both LayerNorm forms run."""
import math

import numpy as np

from ..native.activation import layernorm_rows


def _mean_of_squares(xp, centred, axes):
    """Mean of centred² over `axes` (kept): one fused multiply-add pass without a squared copy
    when the axes are the trailing ones of a contiguous array (LayerNorm's case)."""
    trailing = axes == tuple(range(centred.ndim - len(axes), centred.ndim))
    if xp is np and trailing and centred.flags.c_contiguous and centred.size:
        rows = centred.reshape(-1, math.prod(centred.shape[centred.ndim - len(axes):]))
        var = np.einsum("ij,ij->i", rows, rows)
        var /= rows.shape[1]
        return var.reshape(centred.shape[:centred.ndim - len(axes)] + (1,) * len(axes))
    return xp.square(centred).mean(axis=axes, keepdims=True)


def standardize(xp, x, axes, epsilon, stash_dtype=np.float32, out=None):
    """(normalized x in stash_dtype, mean, inv_std), the statistics kept with their reduced axes.

    The normalized values go into `out` when its dtype is the stash dtype (it may not be x)."""
    x = x.astype(np.result_type(x.dtype, stash_dtype), copy=False)
    mean = x.mean(axis=axes, keepdims=True)
    centred = xp.subtract(x, mean, out=out if out is not None and out.dtype == x.dtype else None)
    var = _mean_of_squares(xp, centred, axes)
    var += var.dtype.type(epsilon)
    inv_std = xp.sqrt(var, out=var)
    xp.reciprocal(inv_std, out=inv_std)
    centred *= inv_std
    return centred, mean, inv_std


def stash_type(code: int):
    """The ONNX stash_type attribute (a TensorProto element type) as a NumPy dtype."""
    return np.dtype(np.float32) if code == 1 else np.dtype(np.float64) if code == 11 else np.dtype(np.float16)


def compiled_layernorm(x, gamma, beta, epsilon: float, out=None):
    """x's rows layer-normalized by the compiled kernel (native/activation.layernorm_rows), gamma and beta (absent:
    ones, zeros) one float32 per column; None where it does not take them. The ONNX op's kernel and the fused
    LayerNorm's both call it (and a plan's program runs the same C), so an unoptimised run and a planned one agree
    bit for bit: a dynamically quantized model's next quantization turns a last-bit difference into a step."""
    cols = x.shape[-1] if x.ndim else 0
    params = []
    for p, fill in ((gamma, 1.0), (beta, 0.0)):
        if p is None:
            p = np.full(cols, fill, np.float32)
        elif type(p) is not np.ndarray or p.dtype != np.float32 or p.ndim == 0 or p.size != cols or p.shape[-1] != cols:
            return None
        params.append(np.ascontiguousarray(p).reshape(cols))
    return layernorm_rows(x, *params, epsilon, out)
