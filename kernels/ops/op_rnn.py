"""RNN: H_t = f(X_t W^T + H_{t-1} R^T + Wb + Rb)."""
from ._rnn import RNN_ATTRIBUTES, RecurrentKernel


class RNN_1(RecurrentKernel):
    attributes = {**RNN_ATTRIBUTES, "output_sequence": 0}
    default_activations = ("Tanh",)

    def cell(self, xw, state, r, rb, p, acts):
        (h,) = state
        return (acts[0](self.clipped(xw + h @ r.T)),)


class RNN_7(RNN_1):
    attributes = RNN_ATTRIBUTES


class RNN_14(RNN_1):
    """Adds `layout` (batch-major tensors)."""

    attributes = {**RNN_ATTRIBUTES, "layout": 0}
