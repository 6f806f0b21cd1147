"""Scatter arithmetic shared by ScatterElements (and its old name Scatter) and ScatterND.

Both copy the data and write updates at computed positions; a `reduction` folds each update
into what is there with the ufunc's unbuffered `.at`, so repeated indices accumulate.
"""
import numpy as np

from rtd.errors import Code, RtdError

from ..native.scatter import scatter_add_rows
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
    rows = _whole_slices(xp, indices, data.shape, axis) if REDUCTIONS[reduction] and updates.shape == indices.shape else None
    if rows is not None:
        # a graph network's scatter-add: each update row lands on a whole slice of the data, so the
        # reduction runs slice by slice (the same additions in the same order: half the time), and
        # only the slices' indices are checked and wrapped
        out = data.copy()
        rows = wrap_indices(xp, rows, data.shape[axis], "ScatterElements")
        target, moved = xp.moveaxis(out, axis, 0), xp.moveaxis(updates, axis, 0)
        if reduction != "add" or xp is not np or not scatter_add_rows(target, rows, moved):   # compiled: float32 sums
            getattr(xp, REDUCTIONS[reduction]).at(target, rows, moved)
        return out
    where = list(np.indices(indices.shape, sparse=True))
    where[axis] = wrap_indices(xp, indices, data.shape[axis], "ScatterElements")
    return _write(xp, data.copy(), tuple(where), updates, reduction)


def _whole_slices(xp, indices, shape: tuple, axis: int):
    """The index of each slice along `axis` when `indices` spans the data's other axes whole and is
    constant across them (an index vector expanded over features); None otherwise."""
    if indices.shape[:axis] + indices.shape[axis + 1:] != shape[:axis] + shape[axis + 1:] or not indices.size:
        return None
    moved = xp.moveaxis(indices, axis, 0).reshape(indices.shape[axis], -1)
    return moved[:, 0] if bool((moved == moved[:, :1]).all()) else None


def scatter_nd(xp, data, indices, updates, reduction: str):
    where = tuple(wrap_indices(xp, indices[..., i], data.shape[i], "ScatterND") for i in range(indices.shape[-1]))
    return _write(xp, data.copy(), where, updates, reduction)
