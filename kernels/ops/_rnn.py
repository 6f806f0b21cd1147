"""The recurrent-layer frame shared by RNN, GRU and LSTM.

`RecurrentKernel.run` handles layouts, directions, initial states, sequence_lens and the output
assembly; a subclass supplies its default activations, the bias split (`split_bias`), the
per-run buffers (`buffers`) and one time step (`cell`). A subclass whose weights are not plain float
arrays (DynamicQuantizeLSTM's 8-bit ones) also overrides the two products: `project_rows` (X by W
for every step) and `product` (R by H in a step).

Speed comes from the layout: the loop works "transposed", gates as (directions, gates·hidden,
batch) and H as (directions, hidden, batch), so each step's recurrent product is R @ H with R
used as stored (BLAS is slow on the tiny-M form H @ R^T and a transposed copy of R per run would
cost as much as it saves). The input projection X @ W^T (+ biases) is one GEMM over all time
steps and directions before the loop, rearranged to (step, gates, batch) one batch column at a
time; each step then works in buffers allocated once per run, with
activations applied in place, and writes H straight into the output sequence. Directions run
stacked in one loop when their recurrent weights together fit in cache and share activations,
else one after the other (each direction's R then stays in cache across its steps).
Reverse directions (and ragged `sequence_lens`) reverse each sequence within its own length.
On the CPU a subclass's `compiled_loop` runs every direction's steps in one compiled call instead
(native/recurrent.py: R packed once, the directions on threads of their own), from the same
projected inputs and into the same (seq, dirs, hidden, batch) outputs.
"""
import numpy as np

from rtd.errors import Code, RtdError

from ..constant import frozen
from ..native.gemm import gemm_rows
from .base import Kernel

_STACK_BYTES = 512 * 1024  # recurrent weights up to this size run both directions in one loop


def _activation(name, alpha, beta, xp):
    """`f(x, out)`: writes the activation of x into out (which may be x itself)."""
    n = name.lower()

    def sigmoid(x, out):  # 1 / (1 + exp(-x)), the same operations in place
        xp.negative(x, out=out)
        xp.exp(out, out=out)
        out += 1
        xp.reciprocal(out, out=out)

    def affine(x, out):
        xp.multiply(x, alpha, out=out)
        out += beta

    def scaled_tanh(x, out):
        xp.multiply(x, beta, out=out)
        xp.tanh(out, out=out)
        out *= alpha

    in_place = {"sigmoid": sigmoid, "affine": affine, "scaledtanh": scaled_tanh,
                "tanh": lambda x, out: xp.tanh(x, out=out), "relu": lambda x, out: xp.maximum(x, 0, out=out)}
    rare = {  # allocate, then copy: not worth in-place forms
        "leakyrelu": lambda x: xp.where(x >= 0, x, alpha * x),
        "thresholdedrelu": lambda x: xp.where(x > alpha, x, 0),
        "hardsigmoid": lambda x: xp.clip(alpha * x + beta, 0, 1),
        "elu": lambda x: xp.where(x >= 0, x, alpha * (xp.exp(x) - 1)),
        "softsign": lambda x: x / (1 + xp.abs(x)),
        "softplus": lambda x: xp.log1p(xp.exp(x)),
    }
    if n in in_place:
        return in_place[n]
    if n not in rare:
        raise RtdError(Code.E_OP_UNSUPPORTED, f"recurrent activation {name!r}")

    def copied(x, out, f=rare[n]):
        out[...] = f(x)
    return copied


_DEFAULT_ALPHA = {"leakyrelu": 0.01, "thresholdedrelu": 1.0, "hardsigmoid": 0.2, "elu": 1.0,
                  "affine": 1.0, "scaledtanh": 1.0}
_DEFAULT_BETA = {"hardsigmoid": 0.5, "affine": 0.0, "scaledtanh": 1.0}
_NEEDS = {"leakyrelu": 1, "thresholdedrelu": 1, "elu": 1, "hardsigmoid": 2, "affine": 2, "scaledtanh": 2}

def _transpose_into(out, src):
    """out[..., i, j] = src[..., j, i], one copy per index of the shorter axis: NumPy copies with a
    short axis (a batch of 2) innermost about 6× slower than along the long one."""
    a, b = src.shape[-2:]
    if a <= b:
        for j in range(a):
            out[..., j] = src[..., j, :]
    else:
        for i in range(b):
            out[..., i, :] = src[..., i]


RNN_ATTRIBUTES = {"activation_alpha": None, "activation_beta": None, "activations": None, "clip": None,
                  "direction": "forward", "hidden_size": None}


class RecurrentKernel(Kernel):
    state_count = 1  # H, plus C for LSTM
    default_activations: tuple = ()

    def setup(self):
        if self.direction not in ("forward", "reverse", "bidirectional"):
            raise RtdError(Code.E_MODEL_INVALID, f"{self.op_type}: direction {self.direction!r}")
        dirs = 2 if self.direction == "bidirectional" else 1
        names = list(self.activations or self.default_activations * dirs)
        alphas, betas = list(self.activation_alpha or []), list(self.activation_beta or [])
        keys, acts = [], []
        for name in names:
            need = _NEEDS.get(name.lower(), 0)
            alpha = alphas.pop(0) if need >= 1 and alphas else _DEFAULT_ALPHA.get(name.lower())
            beta = betas.pop(0) if need >= 2 and betas else _DEFAULT_BETA.get(name.lower())
            keys.append((name.lower(), alpha, beta))
            acts.append(_activation(name, alpha, beta, self.xp))
        per = len(self.default_activations)
        self.acts_per_direction = [acts[i * per:(i + 1) * per] for i in range(dirs)]
        self.default_acts = all(name == default.lower() for (name, _, _), default in
                                zip(keys, self.default_activations * dirs))
        self.same_activations = keys[:per] == keys[per:2 * per] or dirs == 1

    def activate(self, acts, role, x, out=None):
        """acts[role] of x (clipped first, except H's output activation) into out (default: in place)."""
        out = x if out is None else out
        if self.clip is not None and role < 2:
            self.xp.clip(x, -self.clip, self.clip, out=out)
            x = out
        acts[role](x, out)
        return out

    def split_bias(self, wb, rb):
        """(bias added once to the input projection, bias added at every step or None); (dirs, G) each."""
        return wb + rb, None

    def buffers(self, r, step_bias, peephole, batch):
        """The per-run scratch of one loop over r ([D,] G, hidden): a dict `cell` reads."""
        raise NotImplementedError

    def cell(self, k, acts, xw, states, outs):
        """One step: xw ([D,] G, batch) projected inputs, states ([D,] hidden, batch) each; writes outs.

        The direction axis D is there only when directions run stacked: slice gates on axis -2.
        """
        raise NotImplementedError

    def run(self, x, w, r, b=None, sequence_lens=None, *initial):
        xp = self.xp
        layout = self.__dict__.get("layout", 0)
        if layout:
            x = x.transpose(1, 0, 2)
        seq, batch, _ = x.shape
        dirs, gh, _ = w.shape
        hidden = r.shape[2]
        initial = list(initial) + [None] * (self.state_count + 1 - len(initial))
        peephole = initial[self.state_count] if self.state_count > 1 else None  # LSTM's P follows initial_c
        states = []  # (dirs, hidden, batch), owned by this run: the loop updates them in place
        for s in initial[:self.state_count]:
            state = xp.zeros((dirs, hidden, batch), x.dtype)
            if s is not None:
                state[...] = (s.transpose(1, 0, 2) if layout else s).transpose(0, 2, 1)
            states.append(state)
        lens = None if sequence_lens is None else self.host(sequence_lens).astype(np.int64)
        if lens is not None and (lens == seq).all():
            lens = None
        proj_bias, step_bias = (None, None) if b is None else self.split_bias(b[:, :gh], b[:, gh:])
        xw = self.project(x, w, proj_bias, lens)
        yt = (xp.zeros if lens is not None else xp.empty)((seq, dirs, hidden, batch), x.dtype)
        alive = None if lens is None else xp.asarray(np.arange(seq).reshape(-1, 1) < lens)  # (seq, batch)
        stacked = self.same_activations and r.nbytes <= _STACK_BYTES
        compiled = alive is None and peephole is None and self.compiled_loop(xw, r, step_bias, states, yt)
        # a slice keeps the direction axis (stacked loop); an index drops it, so each step is a 2-D GEMM
        for group in [] if compiled else [slice(0, dirs)] if stacked else range(dirs):
            k = self.buffers(r[group], None if step_bias is None else step_bias[group],
                             None if peephole is None else peephole[group], batch)
            acts = self.acts_per_direction[0 if stacked else group]
            self.loop(k, acts, xw[:, group], [s[group] for s in states], yt[:, group], alive)
        y = xp.empty((seq, dirs, batch, hidden), x.dtype)
        for d in range(dirs):
            steps = yt[:, d]  # (seq, hidden, batch)
            _transpose_into(y[:, d], self.reorder(steps, lens, batch_axis=2) if self.reverse(d) else steps)
        outs = [y] + [xp.ascontiguousarray(s.transpose(0, 2, 1)) for s in states]
        if layout:
            outs = [outs[0].transpose(2, 0, 1, 3)] + [o.transpose(1, 0, 2) for o in outs[1:]]
        return tuple(outs)

    def compiled_loop(self, xw, r, step_bias, states, yt) -> bool:
        """Every direction's steps in compiled code, where the op has such a kernel (LSTM); False otherwise."""
        return False

    def loop(self, k, acts, xw, states, yt, alive):
        """Run every step of one direction group; H goes straight into yt[t] (unless lengths are ragged)."""
        xp = self.xp
        if alive is None:
            current = list(states)
            for t in range(xw.shape[0]):
                self.cell(k, acts, xw[t], current, [yt[t]] + states[1:])
                current[0] = yt[t]
            if xw.shape[0]:
                states[0][...] = yt[-1]
            return
        news = [xp.empty_like(s) for s in states]
        for t in range(xw.shape[0]):
            self.cell(k, acts, xw[t], states, news)
            for s, n in zip(states, news):
                xp.copyto(s, n, where=alive[t])
            xp.copyto(yt[t], news[0], where=alive[t])

    def reverse(self, d):
        return self.direction == "reverse" or d == 1

    def project(self, x, w, bias, lens):
        """X @ W^T (+ bias) for every step as one GEMM, as (seq, dirs, G, batch), reverse directions reordered."""
        xp = self.xp
        seq, batch, _ = x.shape
        dirs, gh, _ = w.shape
        proj = self.project_rows(x.reshape(seq * batch, x.shape[2]), w).reshape(seq, batch, dirs, gh)
        if bias is not None:
            proj += bias
        xw = xp.empty((seq, dirs, gh, batch), proj.dtype)
        for d in range(dirs):
            steps = proj[:, :, d]  # (seq, batch, G)
            _transpose_into(xw[:, d], self.reorder(steps, lens) if self.reverse(d) else steps)
        return xw

    def project_rows(self, rows, w):
        """rows (steps, input) @ W^T of every direction: (steps, dirs·G)."""
        weights = w.reshape(w.shape[0] * w.shape[1], -1).T
        # rows shared among the tenant's threads; a W that cannot change is packed once, kept with it
        proj = gemm_rows(rows, weights, constant=frozen(w), owner=w) if self.xp is np else None
        return self.xp.matmul(rows, weights) if proj is None else proj

    def product(self, r, h, out):
        """One step's recurrent product R @ H into out ([D,] G, batch)."""
        self.xp.matmul(r, h, out=out)

    def reorder(self, v, lens, batch_axis=1):
        """Reverse each batch item's sequence (axis 0) within its own length (the tail stays in place)."""
        if lens is None:
            return v[::-1]
        xp = self.xp
        v = xp.moveaxis(v, batch_axis, 1)
        seq = v.shape[0]
        t = np.arange(seq).reshape(-1, 1)
        src = np.where(t < lens, lens - 1 - t, t)  # (seq, batch)
        return xp.moveaxis(v[xp.asarray(src), xp.arange(v.shape[1])], 1, batch_axis)
