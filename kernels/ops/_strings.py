"""The ai.onnx string ops' shared pieces: tensors of text computed on the host.

String tensors are object arrays whose elements arrive as `str` (an in-process caller) or
UTF-8 `bytes` (the KServe wire form). The kernels convert them once to NumPy's variable-width
StringDType, on which np.strings and np.char run element loops in C (unlike the fixed-width
'U' dtype it keeps trailing NULs), and hand back object arrays of `str`.
"""
import numpy as np

from rtd.errors import Code

from .base import HostKernel

TEXT = np.dtypes.StringDType()


class StringKernel(HostKernel):
    """An op over string tensors, computed in NumPy on the host."""

    def strings(self, x: np.ndarray) -> np.ndarray:
        """A string tensor as StringDType; a numeric tensor or text that is not UTF-8 is a bad input."""
        if x.dtype != object:
            self.refuse(f"input dtype {x.dtype} is not string", Code.E_INPUT_INVALID)
        try:
            return x.astype(TEXT)
        except UnicodeDecodeError:
            self.refuse("a string element is not UTF-8", Code.E_INPUT_INVALID)


    def texts(self, x: np.ndarray) -> np.ndarray:
        """A string tensor as an object array of `str` (itself when it already is one: no copy)."""
        if x.dtype == object and set(map(type, x.reshape(-1))) <= {str}:
            return x
        return self.strings(x).astype(object)


def as_objects(x) -> np.ndarray:
    """A StringDType array as the object array of `str` the executor passes on."""
    return np.asarray(x, dtype=TEXT).astype(object)   # 0-d results come back from np.strings as str
