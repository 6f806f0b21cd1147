"""GRU: update/reset/hidden gates (zrh order), with linear_before_reset choosing where Rbh applies."""
import numpy as np

from ..native.recurrent import gru
from ._quant import frozen
from ._rnn import RNN_ATTRIBUTES, RecurrentKernel


class GRU_1(RecurrentKernel):
    attributes = {**RNN_ATTRIBUTES, "output_sequence": 0}
    default_activations = ("Sigmoid", "Tanh")

    def split_bias(self, wb, rb):
        """Rbh stays out of the projection only when the reset gate multiplies it (linear_before_reset)."""
        if not self.__dict__.get("linear_before_reset", 0):
            return wb + rb, None
        n = rb.shape[1] // 3
        folded = wb.copy()
        folded[:, :2 * n] += rb[:, :2 * n]
        return folded, rb[:, 2 * n:]

    def buffers(self, r, step_bias, peephole, batch):
        xp, lead, (gh, n) = self.xp, r.shape[:-2], r.shape[-2:]
        k = {"r": r, "rh": r[..., 2 * n:, :], "rzr": r[..., :2 * n, :], "hr": xp.empty(lead + (gh, batch), r.dtype),
             "zr": xp.empty(lead + (2 * n, batch), r.dtype), "tmp": xp.empty(lead + (n, batch), r.dtype),
             "bias": None if step_bias is None else step_bias[..., None]}
        k["z"], k["reset"] = k["zr"][..., :n, :], k["zr"][..., n:, :]
        return k

    def compiled_loop(self, xw, r, step_bias, states, yt) -> bool:
        """The default GRU (sigmoid/tanh, no clip) on the CPU: recurrent.c, one call for all directions."""
        if self.xp is not np or not self.default_acts or self.clip is not None:
            return False
        rbh = None if step_bias is None else np.ascontiguousarray(step_bias)
        lbr = bool(self.__dict__.get("linear_before_reset", 0))
        return gru(xw, np.ascontiguousarray(r), rbh, states[0], yt, lbr, frozen(r))

    def cell(self, k, acts, xw, states, outs):
        xp = self.xp
        (h,), (h_out,) = states, outs
        n = h.shape[-2]
        zr, cand, tmp = k["zr"], k["hr"][..., 2 * n:, :], k["tmp"]
        if self.__dict__.get("linear_before_reset", 0):
            hr = xp.matmul(k["r"], h, out=k["hr"])
            if k["bias"] is not None:
                cand += k["bias"]
            xp.add(xw[..., :2 * n, :], hr[..., :2 * n, :], out=zr)
            self.activate(acts, 0, zr)
            cand *= k["reset"]  # reset ⊙ (H Rh^T + Rbh)
        else:
            xp.matmul(k["rzr"], h, out=zr)
            zr += xw[..., :2 * n, :]
            self.activate(acts, 0, zr)
            xp.matmul(k["rh"], xp.multiply(k["reset"], h, out=tmp), out=cand)
        cand += xw[..., 2 * n:, :]
        self.activate(acts, 1, cand)
        # (1 - z) ⊙ cand + z ⊙ h, as cand + z ⊙ (h - cand)
        tmp = xp.subtract(h, cand, out=tmp)
        tmp *= k["z"]
        xp.add(cand, tmp, out=h_out)


class GRU_3(GRU_1):
    """Adds linear_before_reset."""

    attributes = {**RNN_ATTRIBUTES, "output_sequence": 0, "linear_before_reset": 0}


class GRU_7(GRU_1):
    attributes = {**RNN_ATTRIBUTES, "linear_before_reset": 0}


class GRU_14(GRU_1):
    """Adds `layout` (batch-major tensors)."""

    attributes = {**RNN_ATTRIBUTES, "linear_before_reset": 0, "layout": 0}
