"""LSTM: input/output/forget/cell gates (iofc order), optional peepholes and coupled input-forget."""
from ._rnn import RNN_ATTRIBUTES, RecurrentKernel


class LSTM_1(RecurrentKernel):
    attributes = {**RNN_ATTRIBUTES, "input_forget": 0, "output_sequence": 0}
    default_activations = ("Sigmoid", "Tanh", "Tanh")
    gates = 4
    state_count = 2

    def cell(self, xw, state, r, rb, p, acts):
        h, c = state
        f, g, hact = acts
        n = h.shape[1]
        pre = xw + h @ r.T
        pi = pre[:, :n] if p is None else pre[:, :n] + p[:n] * c
        pf = pre[:, 2 * n:3 * n] if p is None else pre[:, 2 * n:3 * n] + p[2 * n:] * c
        i = f(self.clipped(pi))
        forget = 1 - i if self.input_forget else f(self.clipped(pf))
        c_new = forget * c + i * g(self.clipped(pre[:, 3 * n:]))
        po = pre[:, n:2 * n] if p is None else pre[:, n:2 * n] + p[n:2 * n] * c_new
        o = f(self.clipped(po))
        return o * hact(c_new), c_new


class LSTM_7(LSTM_1):
    attributes = {**RNN_ATTRIBUTES, "input_forget": 0}


class LSTM_14(LSTM_1):
    """Adds `layout` (batch-major tensors)."""

    attributes = {**RNN_ATTRIBUTES, "input_forget": 0, "layout": 0}
