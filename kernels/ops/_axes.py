"""Axis and index arithmetic shared by the shape and indexing ops: ONNX's negative-axis rule."""
import numpy as np

from rtd.errors import Code, RtdError


def normalize_axis(axis: int, rank: int, op: str) -> int:
    """`axis` in [-rank, rank) as a non-negative axis; E_MODEL_INVALID when out of range."""
    axis = int(axis)
    if not -rank <= axis < max(rank, 1):
        raise RtdError(Code.E_MODEL_INVALID, f"{op}: axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def normalize_axes(axes, rank: int, op: str) -> tuple[int, ...]:
    """Each axis normalized; duplicates are refused (ONNX forbids them everywhere)."""
    out = tuple(normalize_axis(a, rank, op) for a in np.asarray(axes).reshape(-1).tolist())
    if len(set(out)) != len(out):
        raise RtdError(Code.E_MODEL_INVALID, f"{op}: repeated axes {list(out)}")
    return out


def wrap_indices(xp, indices, dim: int, op: str):
    """Indices in [-dim, dim) mapped to [0, dim); anything else is a bad input, not a crash."""
    host = indices if isinstance(indices, np.ndarray) else None
    if host is not None and host.size and (host.min() < -dim or host.max() >= dim):
        raise RtdError(Code.E_INPUT_INVALID, f"{op}: index out of range for a dimension of {dim}")
    return xp.where(indices < 0, indices + dim, indices)


def dims(values, op: str) -> tuple[int, ...]:
    """A shape-like input (target shape, repeats) as ints; negative entries are a bad input."""
    out = tuple(int(v) for v in np.asarray(values).reshape(-1).tolist())
    if any(v < 0 for v in out):
        raise RtdError(Code.E_INPUT_INVALID, f"{op}: negative dimension in {list(out)}")
    return out
