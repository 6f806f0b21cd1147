"""com.microsoft DynamicQuantizeLSTM: an LSTM whose W [dirs, input, 4·hidden] and R [dirs, hidden, 4·hidden]
are 8-bit (what onnxruntime's dynamic quantizer makes of every LSTM), computed as onnxruntime computes it.

Each product with a weight quantizes its float operand on the fly, per tensor, to uint8 (scale from
its range stretched to include 0, zero point rounded half to even): the input projection quantizes
every step's X at once, each recurrent step quantizes H of the whole batch. The integer sums
(exact in float32 or float64, whichever holds 255·|w|·K) are scaled by the operand's scale times the weight's (per
direction, or per gate column) and added to the step's gates in float32, then the bias, clip and
activations as in LSTM (iofc gates, optional peepholes and coupled input-forget).
"""
import numpy as np

from ..native.packed import packed
from ._contrib import MS_DOMAIN
from .op_lstm import LSTM_7


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
        xp, (seq, batch, _), (dirs, hidden) = self.xp, x.shape, r.shape[:2]
        weights = [self._weight(w, w_scale, w_zero_point, "W"), self._weight(r, r_scale, r_zero_point, "R")]
        lens = None if sequence_lens is None else self.host(sequence_lens).astype(np.int64)
        if lens is not None and (lens == seq).all():
            lens = None
        y = xp.zeros((seq, dirs, batch, hidden), np.float32)
        h_last, c_last = xp.empty((dirs, batch, hidden), np.float32), xp.empty((dirs, batch, hidden), np.float32)
        for d in range(dirs):
            steps = self.reorder(x, lens) if self.reverse(d) else x
            projected = self._product(steps.reshape(seq * batch, -1), *weights[0][d]).reshape(seq, batch, 4 * hidden)
            bias = None if b is None else (b[d, :4 * hidden] + b[d, 4 * hidden:]).astype(np.float32)
            h = xp.zeros((batch, hidden), np.float32) if initial_h is None else initial_h[d].astype(np.float32)
            c = xp.zeros((batch, hidden), np.float32) if initial_c is None else initial_c[d].astype(np.float32)
            peephole = None if p is None else p[d].reshape(3, hidden)
            acts = self.acts_per_direction[d]
            out = xp.empty((seq, batch, hidden), np.float32)
            for t in range(seq):
                gates = projected[t] + self._product(h, *weights[1][d])
                if bias is not None:
                    gates += bias
                h_new, c_new = self._step(gates, c, peephole, acts, hidden)
                if lens is not None:   # rows past their length keep their state and output zeros
                    alive = xp.asarray(t < lens)[:, None]
                    h_new, c_new = xp.where(alive, h_new, h), xp.where(alive, c_new, c)
                    out[t] = xp.where(alive, h_new, 0)
                else:
                    out[t] = h_new
                h, c = h_new, c_new
            y[:, d] = self.reorder(out, lens) if self.reverse(d) else out
            h_last[d], c_last[d] = h, c
        return y, h_last, c_last

    def _weight(self, weight, scale, zero_point, name: str) -> list:
        """Per direction: the weight minus its zero point (float32, or float64 where sums could pass 2^24), and its
        scale per gate column."""
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

        def centre():
            centred = weight.astype(np.int32) - zero
            # the integer sums are exact in float32 while they stay below 2^24 (each term at most 255 times a
            # centred weight): then float32's GEMM, twice as fast, else float64's
            exact = 255 * int(np.abs(centred).max(initial=0)) * weight.shape[1] < 1 << 24
            return centred.astype(np.float32 if exact else np.float64)
        # made once per weight array (a constant), not on every run
        centred = packed(weight, ("dynamic-quantize-lstm", zero.tobytes()), centre) if self.xp is np else centre()
        return [(self.xp.asarray(centred[d]), scale.reshape(dirs, -1)[d]) for d in range(dirs)]

    def _product(self, a, weight, scale):
        """a @ weight as onnxruntime's quantized GEMM computes it: a quantized per tensor to uint8 first."""
        xp = self.xp
        low, high = min(float(a.min()), 0.0), max(float(a.max()), 0.0)
        a_scale = np.float32(1.0) if low == high else (np.float32(high) - np.float32(low)) / np.float32(255)
        a_zero = float(np.rint(min(max(-(np.float32(low) / a_scale), 0.0), 255.0)))
        q = xp.rint(a / a_scale)
        q += a_zero
        xp.maximum(q, 0, out=q)
        xp.minimum(q, 255, out=q)
        q -= a_zero
        # every partial sum is an integer the float type holds exactly: any summation order gives the same
        total = xp.matmul(q.astype(weight.dtype, copy=False), weight).astype(np.float32, copy=False)
        total *= (a_scale * scale).astype(np.float32)
        return total

    def _step(self, gates, c, peephole, acts, hidden):
        xp = self.xp
        i, o, f, cell = (gates[:, k * hidden:(k + 1) * hidden] for k in range(4))
        if peephole is not None:
            i += peephole[0] * c
            f += peephole[2] * c
        self.activate(acts, 0, i)
        self.activate(acts, 0, f)
        if self.input_forget:
            xp.subtract(1, i, out=f)
        self.activate(acts, 1, cell)
        c_new = f * c + i * cell
        if peephole is not None:
            o += peephole[1] * c_new
        self.activate(acts, 0, o)
        return o * self.activate(acts, 2, c_new, out=xp.empty_like(c_new)), c_new
