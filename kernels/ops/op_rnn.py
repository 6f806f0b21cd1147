"""RNN: H_t = f(X_t W^T + H_{t-1} R^T + Wb + Rb)."""
from ._rnn import RNN_ATTRIBUTES, RecurrentKernel


class RNN_1(RecurrentKernel):
    attributes = {**RNN_ATTRIBUTES, "output_sequence": 0}
    default_activations = ("Tanh",)

    def buffers(self, r, step_bias, peephole, batch):
        return {"r": r}

    def cell(self, k, acts, xw, states, outs):
        h_out = self.xp.matmul(k["r"], states[0], out=outs[0])
        h_out += xw
        self.activate(acts, 0, h_out)


class RNN_7(RNN_1):
    attributes = RNN_ATTRIBUTES


class RNN_14(RNN_1):
    """Adds `layout` (batch-major tensors)."""

    attributes = {**RNN_ATTRIBUTES, "layout": 0}
