"""Scatter arithmetic shared by ScatterElements (and its old name Scatter) and ScatterND.

Both copy the data and write updates at computed positions; a `reduction` folds each update
into what is there with the ufunc's unbuffered `.at`, so repeated indices accumulate.
"""
import numpy as np

from rtd.errors import Code, RtdError

from ._axes import normalize_axis, wrap_indices

REDUCTIONS = {"none": None, "add": "add", "mul": "multiply", "max": "maximum", "min": "minimum"}


def check_reduction(op: str, reduction: str, allowed: tuple) -> None:
    if reduction not in allowed:
        raise RtdError(Code.E_OP_UNSUPPORTED, f"{op}: reduction {reduction!r} (this opset allows {list(allowed)})")


def _write(xp, out, where, updates, reduction: str):
    ufunc = REDUCTIONS[reduction]
    if ufunc is None:
        out[where] = updates
    else:
        getattr(xp, ufunc).at(out, where, updates)
    return out


def scatter_elements(xp, data, indices, updates, axis: int, reduction: str):
    axis = normalize_axis(axis, data.ndim, "ScatterElements")
    where = list(np.indices(indices.shape, sparse=True))
    where[axis] = wrap_indices(xp, indices, data.shape[axis], "ScatterElements")
    return _write(xp, data.copy(), tuple(where), updates, reduction)


def scatter_nd(xp, data, indices, updates, reduction: str):
    where = tuple(wrap_indices(xp, indices[..., i], data.shape[i], "ScatterND") for i in range(indices.shape[-1]))
    return _write(xp, data.copy(), where, updates, reduction)
