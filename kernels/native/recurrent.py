"""The guarded calls into the compiled LSTM and GRU recurrences (recurrent.c): one direction's steps in one call.

The caller hands its whole buffers and the direction's index; everything the C will touch is
checked here first (float32, C-contiguous, the shapes the recurrence implies), and the C checks
the spans again. A call this wrapper does not take returns False and the NumPy loop runs.
"""
import numpy as np

from rtd.errors import Code, RtdError

from . import compiled
from .conv import BLAS

FLOAT32 = np.dtype(np.float32)


def _ready(*arrays) -> bool:
    return all(a.dtype == FLOAT32 and a.flags.c_contiguous and a.flags.aligned for a in arrays)


def lstm(xw, r, h, c, yt, gates, direction: int) -> bool:
    """Run every step of `direction`: xw (seq, dirs, 4H, B) projected inputs, r (dirs, 4H, H),
    h and c (dirs, H, B) states updated in place, yt (seq, dirs, H, B) the outputs, gates (4H, B) scratch."""
    if compiled is None or BLAS is None or xw.ndim != 4 or r.ndim != 3 or not _ready(xw, r, h, c, yt, gates):
        return False
    seq, dirs, g, batch = xw.shape
    hidden = r.shape[2]
    if g != 4 * hidden or r.shape != (dirs, g, hidden) or h.shape != (dirs, hidden, batch) or c.shape != h.shape \
            or yt.shape != (seq, dirs, hidden, batch) or gates.shape != (g, batch) or not 0 <= direction < dirs \
            or seq < 1 or min(hidden, batch) < 1:
        return False
    ffi = compiled.ffi

    def at(array, index):   # the direction's slab of a (dirs, ...) array, as a buffer of its own
        return ffi.from_buffer("float[]", array[index], require_writable=array is not r)
    nb = hidden * batch
    status = compiled.lib.rtd_lstm_f32(
        ffi.from_buffer("float[]", xw), xw.size, direction * g * batch, dirs * g * batch, at(r, direction), g * hidden,
        at(h, direction), at(c, direction), nb, ffi.from_buffer("float[]", yt, require_writable=True), yt.size,
        direction * nb, dirs * nb, ffi.from_buffer("float[]", gates, require_writable=True), gates.size, seq, hidden, batch)
    if status != 0:   # the checks above make this unreachable; the C checks again all the same
        raise RtdError(Code.E_INTERNAL, f"LSTM kernel refused its arguments (status {status})")
    return True


def gru(xw, r, rbh, h, yt, scratch, direction: int, linear_before_reset: bool) -> bool:
    """Run every step of `direction`: xw (seq, dirs, 3H, B), r (dirs, 3H, H), rbh (dirs, H) or None (only
    with linear_before_reset), h (dirs, H, B) updated in place, yt (seq, dirs, H, B), scratch (5H, B)."""
    if compiled is None or BLAS is None or xw.ndim != 4 or r.ndim != 3 or not _ready(xw, r, h, yt, scratch):
        return False
    seq, dirs, g, batch = xw.shape
    hidden = r.shape[2]
    if g != 3 * hidden or r.shape != (dirs, g, hidden) or h.shape != (dirs, hidden, batch) \
            or yt.shape != (seq, dirs, hidden, batch) or scratch.shape != (5 * hidden, batch) or not 0 <= direction < dirs \
            or seq < 1 or min(hidden, batch) < 1 or (rbh is not None and (not linear_before_reset or not _ready(rbh)
                                                                          or rbh.shape != (dirs, hidden))):
        return False
    ffi = compiled.ffi
    nb = hidden * batch
    status = compiled.lib.rtd_gru_f32(
        ffi.from_buffer("float[]", xw), xw.size, direction * g * batch, dirs * g * batch,
        ffi.from_buffer("float[]", r[direction]), g * hidden,
        ffi.NULL if rbh is None else ffi.from_buffer("float[]", rbh[direction]), 0 if rbh is None else hidden,
        ffi.from_buffer("float[]", h[direction], require_writable=True), nb,
        ffi.from_buffer("float[]", yt, require_writable=True), yt.size, direction * nb, dirs * nb,
        ffi.from_buffer("float[]", scratch, require_writable=True), scratch.size, seq, hidden, batch, int(linear_before_reset))
    if status != 0:   # the checks above make this unreachable; the C checks again all the same
        raise RtdError(Code.E_INTERNAL, f"GRU kernel refused its arguments (status {status})")
    return True
