"""Standardization over some axes, shared by LayerNormalization, GroupNormalization and
InstanceNormalization: (x - mean) * 1/sqrt(var + eps), computed with in-place ops."""
import numpy as np


def standardize(xp, x, axes, epsilon, stash_dtype=np.float32):
    """(normalized x in stash_dtype, mean, inv_std), the statistics kept with their reduced axes."""
    x = x.astype(np.result_type(x.dtype, stash_dtype), copy=False)
    mean = x.mean(axis=axes, keepdims=True)
    centred = x - mean
    var = xp.square(centred).mean(axis=axes, keepdims=True)
    var += var.dtype.type(epsilon)
    inv_std = xp.sqrt(var, out=var)
    xp.reciprocal(inv_std, out=inv_std)
    centred *= inv_std
    return centred, mean, inv_std


def stash_type(code: int):
    """The ONNX stash_type attribute (a TensorProto element type) as a NumPy dtype."""
    return np.dtype(np.float32) if code == 1 else np.dtype(np.float64) if code == 11 else np.dtype(np.float16)
