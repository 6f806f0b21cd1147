"""The guarded calls into the compiled LSTM, DynamicQuantizeLSTM and GRU recurrences (recurrent.c): every
direction's steps in one call.

R is packed into the recurrence's panels once per weight array when the caller says it cannot change
(native/packed.py), else per call (one pass over R, small beside the steps). Everything the C will touch is checked here
first (float32, C-contiguous, the shapes the recurrence implies), and the C checks the lengths again.
A call this wrapper does not take returns False and the NumPy loop runs.
"""
import numpy as np

from rtd.errors import Code, RtdError

from . import compiled
from .packed import packed

FLOAT32 = np.dtype(np.float32)
MAX_Q8_HIDDEN = 65536   # rtd_lstm_q8_f32's: its int32 sums of 8-bit products stay exact up to this hidden size


def _ready(*arrays) -> bool:
    return all(a.dtype == FLOAT32 and a.flags.c_contiguous and a.flags.aligned for a in arrays)


def _pack_rows(r, rows: tuple) -> np.ndarray:
    """Each direction's R (dirs, G, H) packed block by block, the blocks of rows [a, b) in `rows`, in order."""
    lib, ffi = compiled.lib, compiled.ffi
    hidden, parts = r.shape[2], []
    for d in range(r.shape[0]):
        for a, b in rows:
            block = np.ascontiguousarray(r[d, a:b])
            out = np.empty(lib.rtd_recurrent_packed_len(b - a, hidden), np.float32)
            status = lib.rtd_recurrent_pack(ffi.from_buffer("float[]", block), block.size, b - a, hidden,
                                            ffi.from_buffer("float[]", out, require_writable=True), out.size)
            if status != 0:   # the callers' checks make this unreachable; the C checks again all the same
                raise RtdError(Code.E_INTERNAL, f"recurrent packing refused its arguments (status {status})")
            parts.append(out)
    return np.concatenate(parts)


def pack_lstm(r, constant: bool) -> np.ndarray:
    """LSTM's R (dirs, 4H, H) float32 in rtd_lstm_f32's packed form (kept while r lives when `constant`)."""
    make = lambda: _pack_rows(r, ((0, r.shape[1]),))   # noqa: E731
    return packed(r, ("lstm",), make) if constant else make()


def pack_gru(r, constant: bool) -> np.ndarray:
    """GRU's R (dirs, 3H, H) float32 in rtd_gru_f32's packed form: R_zr then R_h per direction."""
    n = r.shape[2]
    make = lambda: _pack_rows(r, ((0, 2 * n), (2 * n, 3 * n)))   # noqa: E731
    return packed(r, ("gru",), make) if constant else make()


def lstm(xw, r, h, c, yt, constant: bool) -> bool:
    """Run every step of every direction: xw (seq, dirs, 4H, B) projected inputs, r (dirs, 4H, H) (`constant`:
    it cannot change), h and c (dirs, H, B) states updated in place, yt (seq, dirs, H, B) the outputs."""
    if compiled is None or xw.ndim != 4 or r.ndim != 3 or not _ready(xw, r, h, c, yt):
        return False
    seq, dirs, g, batch = xw.shape
    hidden = r.shape[2]
    if g != 4 * hidden or r.shape != (dirs, g, hidden) or h.shape != (dirs, hidden, batch) or c.shape != h.shape \
            or yt.shape != (seq, dirs, hidden, batch) or dirs not in (1, 2) or seq < 1 or min(hidden, batch) < 1:
        return False
    ffi = compiled.ffi
    panels, gates = pack_lstm(r, constant), np.empty(dirs * g * batch, np.float32)
    buf = lambda a: ffi.from_buffer("float[]", a, require_writable=True)   # noqa: E731
    status = compiled.lib.rtd_lstm_f32(buf(xw), xw.size, ffi.from_buffer("float[]", panels), panels.size, buf(h), buf(c),
                                       h.size, buf(yt), yt.size, buf(gates), gates.size, seq, dirs, hidden, batch)
    if status != 0:   # the checks above make this unreachable; the C checks again all the same
        raise RtdError(Code.E_INTERNAL, f"LSTM kernel refused its arguments (status {status})")
    return True


def pack_lstm_q8(r, constant: bool) -> np.ndarray | None:
    """DynamicQuantizeLSTM's R (dirs, H, 4H) int8, as the op stores it, in rtd_lstm_q8_f32's panels: (dirs, bytes per
    direction) int8 (kept while r lives when `constant`); None where the compiled recurrence cannot take it."""
    if compiled is None or type(r) is not np.ndarray or r.dtype != np.int8 or r.ndim != 3 or r.shape[0] not in (1, 2) \
            or not 0 < r.shape[1] <= MAX_Q8_HIDDEN or r.shape[2] != 4 * r.shape[1]:
        return None
    lib, ffi = compiled.lib, compiled.ffi

    def make():
        source = np.ascontiguousarray(r)
        out = np.empty((r.shape[0], lib.rtd_lstm_q8_packed_len(r.shape[1])), np.int8)
        status = lib.rtd_lstm_q8_pack(ffi.from_buffer("int8_t[]", source), source.size, r.shape[0], r.shape[1],
                                      ffi.from_buffer("int8_t[]", out, require_writable=True), out.size)
        if status != 0:   # the checks above make this unreachable; the C checks again all the same
            raise RtdError(Code.E_INTERNAL, f"8-bit recurrent packing refused its arguments (status {status})")
        return out
    return packed(r, ("lstm-q8",), make) if constant else make()


def lstm_q8(xw, panels, r_scale, h, c, yt) -> bool:
    """DynamicQuantizeLSTM's steps, every direction: xw (seq, dirs, 4H, B) projected inputs, panels R packed by
    `pack_lstm_q8`, r_scale (dirs, 4H) float32, h and c (dirs, H, B) updated in place, yt (seq, dirs, H, B) the outputs."""
    if compiled is None or xw.ndim != 4 or not _ready(xw, r_scale, h, c, yt) or panels.dtype != np.int8 \
            or not panels.flags.c_contiguous:
        return False
    seq, dirs, g, batch = xw.shape
    hidden = g // 4
    if g != 4 * hidden or panels.shape != (dirs, compiled.lib.rtd_lstm_q8_packed_len(hidden)) or r_scale.shape != (dirs, g) \
            or h.shape != (dirs, hidden, batch) or c.shape != h.shape or yt.shape != (seq, dirs, hidden, batch) \
            or dirs not in (1, 2) or seq < 1 or min(hidden, batch) < 1 or hidden > MAX_Q8_HIDDEN:
        return False
    ffi = compiled.ffi
    gates, quantized = np.empty(dirs * g * batch, np.float32), np.empty(dirs * batch * (hidden + hidden % 2), np.int16)
    buf = lambda a: ffi.from_buffer("float[]", a, require_writable=True)   # noqa: E731
    status = compiled.lib.rtd_lstm_q8_f32(
        buf(xw), xw.size, ffi.from_buffer("int8_t[]", panels), panels.size, ffi.from_buffer("float[]", r_scale), r_scale.size,
        buf(h), buf(c), h.size, buf(yt), yt.size, buf(gates), gates.size,
        ffi.from_buffer("int16_t[]", quantized, require_writable=True), quantized.size, seq, dirs, hidden, batch)
    if status != 0:   # the checks above make this unreachable; the C checks again all the same
        raise RtdError(Code.E_INTERNAL, f"DynamicQuantizeLSTM kernel refused its arguments (status {status})")
    return True


def lstm_q8_inputs(sums, scale, w_scale, bias, reversed_directions: int, xw) -> bool:
    """DynamicQuantizeLSTM's projected inputs into xw (seq, dirs, 4H, B) float32: sums (dirs, seq * B, 4H) int32, the
    exact products of X's bytes by W's, times scale (float32) * w_scale (dirs, 4H) float32, plus bias (dirs, 4H)
    float32 or None; a direction d with bit d of `reversed_directions` set reversed in time."""
    if compiled is None or xw.ndim != 4 or not _ready(w_scale, xw) or (bias is not None and not _ready(bias)) \
            or sums.dtype != np.int32 or not sums.flags.c_contiguous:
        return False
    seq, dirs, g, batch = xw.shape
    if sums.shape != (dirs, seq * batch, g) or w_scale.shape != (dirs, g) or (bias is not None and bias.shape != (dirs, g)):
        return False
    ffi = compiled.ffi
    status = compiled.lib.rtd_lstm_q8_inputs(
        ffi.from_buffer("int32_t[]", sums), sums.size, float(scale), ffi.from_buffer("float[]", w_scale), w_scale.size,
        ffi.NULL if bias is None else ffi.from_buffer("float[]", bias), 0 if bias is None else bias.size, reversed_directions,
        ffi.from_buffer("float[]", xw, require_writable=True), xw.size, seq, batch, dirs, g)
    if status != 0:   # the checks above make this unreachable; the C checks again all the same
        raise RtdError(Code.E_INTERNAL, f"DynamicQuantizeLSTM's input kernel refused its arguments (status {status})")
    return True


def gru(xw, r, rbh, h, yt, linear_before_reset: bool, constant: bool) -> bool:
    """Run every step of every direction: xw (seq, dirs, 3H, B), r (dirs, 3H, H), rbh (dirs, H) or None (only
    with linear_before_reset), h (dirs, H, B) updated in place, yt (seq, dirs, H, B)."""
    if compiled is None or xw.ndim != 4 or r.ndim != 3 or not _ready(xw, r, h, yt):
        return False
    seq, dirs, g, batch = xw.shape
    hidden = r.shape[2]
    if g != 3 * hidden or r.shape != (dirs, g, hidden) or h.shape != (dirs, hidden, batch) \
            or yt.shape != (seq, dirs, hidden, batch) or dirs not in (1, 2) or seq < 1 or min(hidden, batch) < 1 \
            or (rbh is not None and (not linear_before_reset or not _ready(rbh) or rbh.shape != (dirs, hidden))):
        return False
    ffi = compiled.ffi
    panels, scratch = pack_gru(r, constant), np.empty(dirs * 5 * hidden * batch, np.float32)
    buf = lambda a: ffi.from_buffer("float[]", a, require_writable=True)   # noqa: E731
    status = compiled.lib.rtd_gru_f32(
        buf(xw), xw.size, ffi.from_buffer("float[]", panels), panels.size,
        ffi.NULL if rbh is None else ffi.from_buffer("float[]", rbh), 0 if rbh is None else rbh.size,
        buf(h), h.size, buf(yt), yt.size, buf(scratch), scratch.size, seq, dirs, hidden, batch, int(linear_before_reset))
    if status != 0:   # the checks above make this unreachable; the C checks again all the same
        raise RtdError(Code.E_INTERNAL, f"GRU kernel refused its arguments (status {status})")
    return True
