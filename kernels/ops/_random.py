"""Generators for the random ops: a `seed` attribute makes every run draw the same values.

A float seed is used by its bit pattern (so 0.5 and 0.7 differ); without one each run draws
from fresh OS entropy. A Generator is made per run, so concurrent runs share no state.
"""
import numpy as np
from onnx import helper


def generator(seed) -> np.random.Generator:
    return np.random.default_rng(None if seed is None else int(np.float64(seed).view(np.uint64)))


def dtype_of(dtype_attr, like=None) -> np.dtype:
    """The output dtype: the `dtype` attribute, else the template input's, else float32."""
    if dtype_attr is not None:
        return np.dtype(helper.tensor_dtype_to_np_dtype(dtype_attr))
    return like.dtype if like is not None else np.dtype(np.float32)
