"""com.microsoft DynamicQuantizeLSTM: an LSTM whose W [dirs, input, 4·hidden] and R [dirs, hidden, 4·hidden]
are 8-bit (what onnxruntime's dynamic quantizer makes of every LSTM), computed as onnxruntime computes it.

Each product with a weight quantizes its float operand on the fly, per tensor, to uint8 (scale from
its range stretched to include 0, zero point rounded half to even): the input projection quantizes
all of X at once, each recurrent step quantizes H of the whole batch, per direction. The integer sums
are exact (uint8 less its zero point times the weight less its own, as float32 or float64 GEMMs of
integers wherever the sums fit their mantissa, as int32 in the compiled recurrence), then scaled by the
operand's scale times the weight's (per direction, or per gate column).

Everything else is the float LSTM's: the recurrent frame (_rnn.RecurrentKernel: directions, sequence
lengths, states, outputs) and LSTM's gate math, bias, clip and activations; this kernel only supplies
the two products (`project_rows`, `product`) over its weights as `Quantized`, and on the CPU its own
compiled recurrence (native/recurrent.py's lstm_q8: int8 R, each direction on a thread of its own).
"""
import dataclasses
import functools
import math
from collections.abc import Callable

import numpy as np

from ..constant import frozen
from ..native import quant
from ..native.packed import packed
from ..native.recurrent import lstm_q8, lstm_q8_inputs, pack_lstm_q8
from ._contrib import MS_DOMAIN
from .op_lstm import LSTM_7


@dataclasses.dataclass(frozen=True)
class Quantized:
    """W or R as the recurrent frame takes them: shaped like the float LSTM's (dirs, G, K), products with it float32.

    centred: the weight less its zero point, (dirs, G, K) (a view of it stored (K, dirs, G)), float32 or, where 255·|w|·K could
    pass 2^24, float64, so that a float GEMM's sums are exact integers; made by `make` on first use, which the
    compiled paths never make (it is 4 bytes a weight beside their 1: most of a large model's memory); scale:
    (dirs, G, 1) float32; panels: R in the compiled recurrence's int8 panels (None for uint8 R or off the CPU);
    stored: W's bytes as the op takes them, (dirs, K, G) contiguous, and zero its zero point per direction, for the
    compiled 8-bit input projection (None off the CPU)."""
    make: Callable[[], object]
    shape: tuple
    scale: object
    panels: np.ndarray | None = None
    stored: np.ndarray | None = None
    zero: tuple = ()
    dtype = np.dtype(np.float32)

    @functools.cached_property
    def centred(self):
        return self.make()

    @property
    def nbytes(self):
        return math.prod(self.shape) * self.dtype.itemsize

    def __getitem__(self, group):
        shape = np.broadcast_to(np.empty((), np.int8), self.shape)[group].shape   # the slice's shape, nothing made
        pick = lambda a: None if a is None else a[group]   # noqa: E731
        return Quantized(lambda: self.centred[group], shape, self.scale[group], pick(self.panels), pick(self.stored),
                         tuple(np.asarray(self.zero)[group].reshape(-1).tolist()) if self.zero else ())


class DynamicQuantizeLSTM_1(LSTM_7):
    domain = MS_DOMAIN

    def run(self, x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None,
            w_scale=None, w_zero_point=None, r_scale=None, r_zero_point=None):
        if w_scale is None or w_zero_point is None or r_scale is None or r_zero_point is None:
            self.refuse("W_scale, W_zero_point, R_scale and R_zero_point are required")
        if x.ndim != 3 or w.ndim != 3 or r.ndim != 3 or w.shape[0] != r.shape[0] or w.shape[1] != x.shape[2] \
                or w.shape[2] != r.shape[2] or r.shape[2] != 4 * r.shape[1]:
            self.refuse(f"X {list(x.shape)}, W {list(w.shape)} and R {list(r.shape)} do not make an LSTM "
                        "([seq, batch, input], [dirs, input, 4·hidden], [dirs, hidden, 4·hidden])")
        weights = self._weight(w, w_scale, w_zero_point, "W"), self._weight(r, r_scale, r_zero_point, "R")
        return super().run(x.astype(np.float32, copy=False), *weights, b, sequence_lens, initial_h, initial_c, p)

    def _weight(self, weight, scale, zero_point, name: str) -> Quantized:
        dirs, gates = weight.shape[0], weight.shape[2]
        scale, zero_point = self.host(scale).astype(np.float32), self.host(zero_point)
        if scale.shape not in ((dirs,), (dirs, gates)) or zero_point.shape != scale.shape:
            self.refuse(f"{name}_scale and {name}_zero_point must be [{dirs}] or [{dirs}, {gates}], "
                        f"got {list(scale.shape)} and {list(zero_point.shape)}")
        if zero_point.dtype != weight.dtype:
            self.refuse(f"{name}_zero_point is {zero_point.dtype}, {name} is {weight.dtype}")
        per_direction = zero_point.reshape(dirs, -1)
        if (per_direction != per_direction[:, :1]).any() or (weight.dtype == np.int8 and per_direction.any()):
            # onnxruntime's 8-bit product takes one zero point per direction: 0 for int8 weights
            self.refuse(f"{name}_zero_point must be one value per direction (0 for int8 weights)")
        zero = per_direction[:, :1, None].astype(np.int32)
        constant = frozen(weight)

        def centre():   # laid out (K, dirs, G): every direction's W side by side is one GEMM's operand
            centred = weight.astype(np.int32) - zero
            # the integer sums are exact in float32 while they stay below 2^24 (each term at most 255 times a
            # centred weight): then float32's GEMM, twice as fast, else float64's
            exact = 255 * int(np.abs(centred).max(initial=0)) * weight.shape[1] < 1 << 24
            return centred.transpose(1, 0, 2).astype(np.float32 if exact else np.float64, order="C")
        # made once per weight array where it cannot change, not on every run

        def make():
            centred = packed(weight, ("dynamic-quantize-lstm", zero.tobytes()), centre) if constant else centre()
            return self.xp.asarray(centred).transpose(1, 2, 0)
        on_cpu = self.xp is np and type(weight) is np.ndarray
        panels = pack_lstm_q8(weight, constant) if name == "R" and on_cpu else None
        stored = np.ascontiguousarray(weight) if name == "W" and on_cpu else None
        scale = np.ascontiguousarray(np.broadcast_to(scale.reshape(dirs, -1), (dirs, gates)))[..., None]
        return Quantized(make, (dirs, gates, weight.shape[1]), self.xp.asarray(scale), panels, stored,
                         tuple(zero.reshape(-1).tolist()))

    def _quantized_bytes(self, a):
        """a quantized to uint8 per tensor over its last two axes, as onnxruntime quantizes an operand: its bytes
        (integers in float32), zero point (float32) and scale (float32), the last two shaped to broadcast against a."""
        xp = self.xp
        low = xp.minimum(a.min(axis=(-2, -1), keepdims=True), 0)
        high = xp.maximum(a.max(axis=(-2, -1), keepdims=True), 0)
        scale = xp.where(low == high, np.float32(1), (high - low) / np.float32(255))
        zero = xp.rint(xp.clip(-(low / scale), 0, 255))
        q = xp.rint(a / scale)
        q += zero
        xp.clip(q, 0, 255, out=q)
        return q, zero, scale

    def _x_bytes(self, rows):
        """rows (steps, input) quantized as `_quantized_bytes` quantizes them: uint8 bytes, zero point (int), scale
        (float32); by quant.c's range and quantization passes (the same float32 steps) where they take rows with a
        finite range, else by NumPy's. Contiguous bytes whatever the rows' layout (the compiled product reads them so)."""
        rows = np.ascontiguousarray(rows)
        ends = quant.value_range(rows)
        if ends is not None and math.isfinite(ends[0]) and math.isfinite(ends[1]):
            low, high = min(np.float32(ends[0]), np.float32(0)), max(np.float32(ends[1]), np.float32(0))
            scale = np.float32(1) if low == high else (high - low) / np.float32(255)
            zero = int(np.rint(np.clip(-(low / scale), np.float32(0), np.float32(255))))
            q = quant.quantize(rows, scale, zero, np.uint8)
            if q is not None:
                return q, zero, scale
        q, zero, scale = self._quantized_bytes(rows)
        return q.astype(np.uint8), int(zero.reshape(())), np.float32(scale.reshape(()))

    def _quantize(self, a):
        """a quantized as `_quantized_bytes`, less its zero point (integers in float32), and its scale."""
        q, zero, scale = self._quantized_bytes(a)
        q -= zero
        return q, scale

    def project(self, x, w, bias, lens):
        """On the CPU, without sequence lengths: X's rows quantized once, by each direction's W summed in int32 by the
        compiled 8-bit product from X's bytes and W's as stored, then scaled, biased and laid out as the recurrence
        takes them by one compiled pass (native/recurrent.py's lstm_q8_inputs); else the frame's steps."""
        seq, batch, size = x.shape
        dirs, gates, _ = w.shape
        if w.stored is None or lens is not None or self.xp is not np:
            return super().project(x, w, bias, lens)
        q, zero, scale = self._x_bytes(x.reshape(seq * batch, size))
        sums = np.empty((dirs, seq * batch, gates), np.int32)
        for d in range(dirs):
            if quant.matmul_8bit(q, zero, w.stored[d], w.zero[d], out=sums[d]) is None:
                return super().project(x, w, bias, lens)
        xw = np.empty((seq, dirs, gates, batch), np.float32)
        reversed_directions = sum(1 << d for d in range(dirs) if self.reverse(d))
        w_scale = np.ascontiguousarray(w.scale[..., 0])
        bias = None if bias is None else np.ascontiguousarray(bias, np.float32)
        if not lstm_q8_inputs(sums, scale, w_scale, bias, reversed_directions, xw):
            return super().project(x, w, bias, lens)
        return xw

    def project_rows(self, rows, w):
        """X's rows quantized once, by every direction's W: exact integer sums (on the CPU summed in int32 by the
        compiled 8-bit product from X's bytes and W's as stored, a direction at a time), then scaled per output column."""
        dirs, gates, size = w.shape
        total = None
        if w.stored is not None and rows.ndim == 2:
            q, zero, scale = self._quantized_bytes(rows)
            q = q.astype(np.uint8, order="C")   # rows may be a transposed view: the compiled product reads contiguous bytes
            first = quant.matmul_8bit(q, int(zero.reshape(())), w.stored[0], w.zero[0])
            if first is not None:
                total = np.empty((rows.shape[0], dirs, gates), np.float32)
                total[:, 0] = first
                for d in range(1, dirs):
                    total[:, d] = quant.matmul_8bit(q, int(zero.reshape(())), w.stored[d], w.zero[d])
                total = total.reshape(rows.shape[0], dirs * gates)
        if total is None:
            q, scale = self._quantize(rows)
            total = self.xp.matmul(q.astype(w.centred.dtype, copy=False), w.centred.transpose(2, 0, 1).reshape(size, dirs * gates))
        total = total.astype(np.float32, copy=False)
        total *= scale * w.scale.reshape(1, dirs * gates)
        return total

    def product(self, r, h, out):
        """H quantized per direction (stacked directions: per index of the leading axis), by R, scaled per row."""
        q, scale = self._quantize(h)
        out[...] = self.xp.matmul(r.centred, q.astype(r.centred.dtype, copy=False))
        out *= scale * r.scale

    def compiled_loop(self, xw, r, step_bias, states, yt) -> bool:
        """The default LSTM with int8 R on the CPU: recurrent.c's lstm_q8, one call for all directions."""
        if self.xp is not np or r.panels is None or not self.default_acts or self.clip is not None or self.input_forget \
                or step_bias is not None:
            return False
        return lstm_q8(xw, r.panels, r.scale[..., 0], states[0], states[1], yt)
