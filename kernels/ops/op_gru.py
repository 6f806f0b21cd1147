"""GRU: update/reset/hidden gates (zrh order), with linear_before_reset choosing where Rbh applies."""
from ._rnn import RNN_ATTRIBUTES, RecurrentKernel


class GRU_1(RecurrentKernel):
    attributes = {**RNN_ATTRIBUTES, "output_sequence": 0}
    default_activations = ("Sigmoid", "Tanh")
    fold_recurrent_bias = False
    gates = 3

    def cell(self, xw, state, r, rb, p, acts):
        (h,) = state
        f, g = acts
        n = h.shape[1]
        hr = h @ r[:2 * n].T
        if rb is not None:
            hr += rb[:2 * n]
        z = f(self.clipped(xw[:, :n] + hr[:, :n]))
        rt = f(self.clipped(xw[:, n:2 * n] + hr[:, n:]))
        if self.__dict__.get("linear_before_reset", 0):
            hh = h @ r[2 * n:].T
            if rb is not None:
                hh += rb[2 * n:]
            cand = g(self.clipped(xw[:, 2 * n:] + rt * hh))
        else:
            hh = (rt * h) @ r[2 * n:].T
            if rb is not None:
                hh += rb[2 * n:]
            cand = g(self.clipped(xw[:, 2 * n:] + hh))
        return ((1 - z) * cand + z * h,)


class GRU_3(GRU_1):
    """Adds linear_before_reset."""

    attributes = {**RNN_ATTRIBUTES, "output_sequence": 0, "linear_before_reset": 0}


class GRU_7(GRU_1):
    attributes = {**RNN_ATTRIBUTES, "linear_before_reset": 0}


class GRU_14(GRU_1):
    """Adds `layout` (batch-major tensors)."""

    attributes = {**RNN_ATTRIBUTES, "linear_before_reset": 0, "layout": 0}
