"""Which arrays cannot change: the test a kernel passes before it keeps something made from an array
(packed weight panels, a centred copy) for as long as that array lives.

An array is `frozen` when it and every owner below it (arrays, and read-only memoryviews between them) are
read-only down to immutable bytes (initializers parsed from the model), to nothing (the loader's own read-only
arrays of each weight), or to an owner a caller vouched for (`vouch`: the worker's weights,
read-only views of sealed memfds that NumPy sees only as a memoryview). `read_only` makes a value the
lowering computed (a folded constant, Conv+BatchNorm's folded weights) frozen, copying it only when an
owner below it can still be written.
"""
import threading
import weakref

import numpy as np

_lock = threading.Lock()
_vouched: dict = {}   # id of an array a caller vouched for -> a weak reference to it


def vouch(array: np.ndarray) -> None:
    """Records that `array`'s bytes never change while it lives (the caller's promise, e.g. a sealed
    memfd's read-only view); it must itself be read-only."""
    if array.flags.writeable:
        raise ValueError("only a read-only array can be vouched for")
    key = id(array)
    with _lock:
        _vouched[key] = weakref.ref(array, lambda _, key=key: _vouched.pop(key, None))


def frozen(x) -> bool:
    """True when x's values cannot change: a read-only NumPy array all the way down to immutable bytes
    (initializers parsed from the model), to a read-only owner (kernels' shared constants) or to an array
    a caller vouched for."""
    while isinstance(x, (np.ndarray, memoryview)):
        if isinstance(x, memoryview):   # a read-only view of the array below it (the loader's weights: np.frombuffer)
            if not x.readonly:
                return False
            x = x.obj
            continue
        if x.flags.writeable:
            return False
        entry = _vouched.get(id(x))
        if entry is not None and entry() is x:
            return True
        x = x.base
    return x is None or isinstance(x, bytes)


def read_only(value) -> np.ndarray:
    """`value` as a frozen array: itself made read-only when nothing below it can be written, else a copy."""
    value = np.asarray(value)
    if frozen(value):
        return value
    if value.base is not None and not frozen(value.base):
        value = value.copy()
    value.flags.writeable = False
    return value
