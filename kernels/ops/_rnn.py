"""The recurrent-layer frame shared by RNN, GRU and LSTM.

`RecurrentKernel.run` handles layouts, directions, initial states, sequence_lens and the
output assembly; a subclass supplies `gates` (how many blocks W stacks), default activations,
and `cell(xw_t, state, r, rb, p, acts) -> new state tuple`, whose first element is H
(`rb` is None when the recurrent bias was folded into the input projection).
The input projection X @ W^T + Wb is one matmul over all time steps; only H @ R^T loops.
Reverse directions (and ragged `sequence_lens`) reverse each sequence within its own length.
"""
import numpy as np

from rtd.errors import Code, RtdError

from .base import Kernel


def _activation(name, alpha, beta, xp):
    n = name.lower()
    table = {
        "relu": lambda x: xp.maximum(x, 0),
        "tanh": xp.tanh,
        "sigmoid": lambda x: 1 / (1 + xp.exp(-x)),
        "affine": lambda x: alpha * x + beta,
        "leakyrelu": lambda x: xp.where(x >= 0, x, alpha * x),
        "thresholdedrelu": lambda x: xp.where(x > alpha, x, 0),
        "scaledtanh": lambda x: alpha * xp.tanh(beta * x),
        "hardsigmoid": lambda x: xp.clip(alpha * x + beta, 0, 1),
        "elu": lambda x: xp.where(x >= 0, x, alpha * (xp.exp(x) - 1)),
        "softsign": lambda x: x / (1 + xp.abs(x)),
        "softplus": lambda x: xp.log1p(xp.exp(x)),
    }
    if n not in table:
        raise RtdError(Code.E_OP_UNSUPPORTED, f"recurrent activation {name!r}")
    return table[n]


_DEFAULT_ALPHA = {"leakyrelu": 0.01, "thresholdedrelu": 1.0, "hardsigmoid": 0.2, "elu": 1.0,
                  "affine": 1.0, "scaledtanh": 1.0}
_DEFAULT_BETA = {"hardsigmoid": 0.5, "affine": 0.0, "scaledtanh": 1.0}
_NEEDS = {"leakyrelu": 1, "thresholdedrelu": 1, "elu": 1, "hardsigmoid": 2, "affine": 2, "scaledtanh": 2}

RNN_ATTRIBUTES = {"activation_alpha": None, "activation_beta": None, "activations": None, "clip": None,
                  "direction": "forward", "hidden_size": None}


class RecurrentKernel(Kernel):
    gates = 1
    state_count = 1  # H, plus C for LSTM
    default_activations: tuple = ()
    fold_recurrent_bias = True  # Rb can join Wb in the input projection (not for GRU's reset-gated Rbh)

    def setup(self):
        if self.direction not in ("forward", "reverse", "bidirectional"):
            raise RtdError(Code.E_MODEL_INVALID, f"{self.op_type}: direction {self.direction!r}")
        dirs = 2 if self.direction == "bidirectional" else 1
        names = list(self.activations or self.default_activations * dirs)
        alphas, betas = list(self.activation_alpha or []), list(self.activation_beta or [])
        acts = []
        for name in names:
            need = _NEEDS.get(name.lower(), 0)
            alpha = alphas.pop(0) if need >= 1 and alphas else _DEFAULT_ALPHA.get(name.lower())
            beta = betas.pop(0) if need >= 2 and betas else _DEFAULT_BETA.get(name.lower())
            acts.append(_activation(name, alpha, beta, self.xp))
        per = len(self.default_activations)
        self.acts_per_direction = [acts[i * per:(i + 1) * per] for i in range(dirs)]

    def clipped(self, x):
        return x if self.clip is None else self.xp.clip(x, -self.clip, self.clip)

    def run(self, x, w, r, b=None, sequence_lens=None, *initial):
        xp = self.xp
        layout = self.__dict__.get("layout", 0)
        if layout:
            x = x.transpose(1, 0, 2)
        seq, batch, _ = x.shape
        dirs, gh, _ = w.shape
        hidden = r.shape[2]
        initial = list(initial) + [None] * (self.state_count + 1 - len(initial))
        peep = initial[self.state_count] if self.state_count > 1 else None  # LSTM's P follows initial_c
        states0 = []
        for s in initial[:self.state_count]:
            if s is not None and layout:
                s = s.transpose(1, 0, 2)
            states0.append(s)
        lens = None if sequence_lens is None else self.host(sequence_lens).astype(np.int64)
        if lens is not None and (lens == seq).all():
            lens = None
        y = xp.zeros((seq, dirs, batch, hidden), x.dtype)
        finals = [[] for _ in range(self.state_count)]
        for d in range(dirs):
            reverse = self.direction == "reverse" or d == 1
            xd = self.reorder(x, lens, seq) if reverse else x
            xw = xp.matmul(xd.reshape(seq * batch, -1), w[d].T).reshape(seq, batch, gh)
            rb = None
            if b is not None:
                xw += b[d, :gh]
                if self.fold_recurrent_bias:
                    xw += b[d, gh:]
                else:
                    rb = b[d, gh:]
            state = tuple(s[d] if s is not None else xp.zeros((batch, hidden), x.dtype) for s in states0)
            p = peep[d] if peep is not None else None
            ys = xp.zeros((seq, batch, hidden), x.dtype)
            for t in range(seq):
                new = self.cell(xw[t], state, r[d], rb, p, self.acts_per_direction[d])
                if lens is not None:
                    alive = xp.asarray((t < lens).reshape(-1, 1))
                    new = tuple(xp.where(alive, n, s) for n, s in zip(new, state))
                    ys[t] = xp.where(alive, new[0], 0)
                else:
                    ys[t] = new[0]
                state = new
            y[:, d] = self.reorder(ys, lens, seq) if reverse else ys
            for i, s in enumerate(state):
                finals[i].append(s)
        outs = [y] + [xp.stack(f) for f in finals]
        if layout:
            outs = [outs[0].transpose(2, 0, 1, 3)] + [o.transpose(1, 0, 2) for o in outs[1:]]
        return tuple(outs)

    def reorder(self, v, lens, seq):
        """Reverse each batch item's sequence within its own length (the tail stays in place)."""
        if lens is None:
            return v[::-1]
        t = np.arange(seq).reshape(-1, 1)
        src = np.where(t < lens, lens - 1 - t, t)  # (seq, batch)
        return v[self.xp.asarray(src), self.xp.arange(v.shape[1])]
