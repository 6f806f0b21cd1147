"""Constant weights in a compiled kernel's packed layout, made once per weight array and shared by every
kernel instance that multiplies by it (a traced run's kernels and each shape signature's plan), dropped
when the weight array itself goes. Only weights that cannot change are handed here: the lowering's
constants (a fused MatMulBias's weight) or arrays `frozen` all the way down. A product's weight that nothing
else reads never comes here: the compile keeps it as its panels alone (kernels/lower/packing.py).
"""
import threading
import weakref

_lock = threading.Lock()
_kept: dict = {}   # (id of the weight, packing) -> (a weak reference to the weight, its packed form)


def packed(weight, packing: tuple, make):
    """`make()`'s packed form of `weight` for `packing` (anything hashable naming the layout), made on the
    first call for this array and kept while the array lives."""
    key = (id(weight), packing)
    entry = _kept.get(key)
    if entry is not None and entry[0]() is weight:
        return entry[1]
    value = make()
    value.flags.writeable = False
    with _lock:
        _kept[key] = (weakref.ref(weight, lambda _, key=key: _kept.pop(key, None)), value)
    return value
