"""LSTM: input/output/forget/cell gates (iofc order), optional peepholes and coupled input-forget."""
import numpy as np

from ..native.recurrent import lstm
from ._quant import frozen
from ._rnn import RNN_ATTRIBUTES, RecurrentKernel


class LSTM_1(RecurrentKernel):
    attributes = {**RNN_ATTRIBUTES, "input_forget": 0, "output_sequence": 0}
    default_activations = ("Sigmoid", "Tanh", "Tanh")
    state_count = 2

    def buffers(self, r, step_bias, peephole, batch):
        xp, lead, n = self.xp, r.shape[:-2], r.shape[-1]
        gates = xp.empty(lead + (4 * n, batch), r.dtype)
        k = {"r": r, "gates": gates, "tmp": xp.empty(lead + (n, batch), r.dtype), "i": gates[..., :n, :],
             "o": gates[..., n:2 * n, :], "f": gates[..., 2 * n:3 * n, :], "iof": gates[..., :3 * n, :],
             "cell": gates[..., 3 * n:, :], "p": None}
        if peephole is not None:  # P is ([D,] 3·hidden) in iof order; as columns against ([D,] hidden, batch)
            k["p"] = [peephole[..., j * n:(j + 1) * n, None] for j in range(3)]
        return k

    def compiled_loop(self, xw, r, step_bias, states, yt) -> bool:
        """The default LSTM (sigmoid/tanh/tanh, no clip, no coupled gates) on the CPU: recurrent.c, one call for all directions."""
        if self.xp is not np or not self.default_acts or self.clip is not None or self.input_forget or step_bias is not None:
            return False
        return lstm(xw, np.ascontiguousarray(r), states[0], states[1], yt, frozen(r))

    def cell(self, k, acts, xw, states, outs):
        xp = self.xp
        (h, c), (h_out, c_out) = states, outs
        i, o, f, tmp, p = k["i"], k["o"], k["f"], k["tmp"], k["p"]
        self.product(k["r"], h, k["gates"])
        k["gates"] += xw
        if p is None:
            self.activate(acts, 0, k["iof"])
        else:
            i += xp.multiply(p[0], c, out=tmp)
            f += xp.multiply(p[2], c, out=tmp)
            self.activate(acts, 0, i)
            self.activate(acts, 0, f)
        if self.input_forget:
            xp.subtract(1, i, out=f)
        self.activate(acts, 1, k["cell"])
        xp.multiply(f, c, out=c_out)
        c_out += xp.multiply(i, k["cell"], out=tmp)
        if p is not None:
            o += xp.multiply(p[1], c_out, out=tmp)
            self.activate(acts, 0, o)
        xp.multiply(o, self.activate(acts, 2, c_out, out=tmp), out=h_out)


class LSTM_7(LSTM_1):
    attributes = {**RNN_ATTRIBUTES, "input_forget": 0}


class LSTM_14(LSTM_1):
    """Adds `layout` (batch-major tensors)."""

    attributes = {**RNN_ATTRIBUTES, "input_forget": 0, "layout": 0}
