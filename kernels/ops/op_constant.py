"""Constant: a tensor given by exactly one attribute (value; sparse_value from 11; scalars/lists from 12).

The array is built once at compile time and returned by every run: consumers must not write
into it (the fuser writes in place only into buffers it allocated).
"""
import numpy as np
from onnx import numpy_helper

from rtd.errors import Code, RtdError

from .base import Kernel


def _dense(sparse) -> np.ndarray:
    """A SparseTensorProto as a dense array (indices are flat or [nnz, rank] coordinates)."""
    values = numpy_helper.to_array(sparse.values)
    indices = numpy_helper.to_array(sparse.indices)
    dense = np.zeros(tuple(sparse.dims), values.dtype)
    if indices.ndim == 2:
        dense[tuple(indices.T)] = values
    else:
        dense.reshape(-1)[indices] = values
    return dense


class Constant_1(Kernel):
    attributes = {"value": None}
    builders = {
        "value": np.asarray,
        "sparse_value": _dense,
        "value_float": lambda v: np.array(v, np.float32),
        "value_floats": lambda v: np.array(v, np.float32),
        "value_int": lambda v: np.array(v, np.int64),
        "value_ints": lambda v: np.array(v, np.int64),
        "value_string": lambda v: np.array(v, object),
        "value_strings": lambda v: np.array(v, object),
    }

    def setup(self):
        given = [name for name in self.attributes if getattr(self, name) is not None]
        if len(given) != 1:
            raise RtdError(Code.E_MODEL_INVALID, f"Constant: exactly one value attribute expected, got {given}")
        self.array = self.xp.asarray(self.builders[given[0]](getattr(self, given[0])))
        if isinstance(self.array, np.ndarray):
            self.array.flags.writeable = False  # shared by every run: a caller must not edit it

    def run(self):
        return (self.array,)


class Constant_11(Constant_1):
    attributes = {"value": None, "sparse_value": None}


class Constant_12(Constant_1):
    attributes = dict.fromkeys(Constant_1.builders)
