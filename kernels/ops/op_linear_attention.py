"""LinearAttention: recurrent (linear-state) attention over packed (B, T, H * D) inputs, the
state S (B, H_kv, d_k, d_v) carried from past_state (zeros by default) to present_state.

Per token, by update_rule: "gated" and "gated_delta" first scale S by exp(decay) (per head, or
per key dimension); "delta" and "gated_delta" replace v by beta * (v - S^T k); then S += k (x) v,
and the output is scale * q^T S (scale 1/sqrt(d_k) when 0). Query heads share key/value heads in
groups of q_num_heads / kv_num_heads (head h reads kv head h // group). The tokens run in order
(the recurrence is sequential), each step one batched contraction over every batch row and
head, in float32; chunk_size is a tuning hint of chunk-parallel kernels and changes nothing.
"""
import numpy as np

from rtd.errors import Code, RtdError

from .base import REQUIRED, Kernel

_RULES = ("linear", "gated", "delta", "gated_delta")


class LinearAttention_27(Kernel):
    attributes = {"chunk_size": 64, "kv_num_heads": REQUIRED, "q_num_heads": REQUIRED, "scale": 0.0, "update_rule": "gated_delta"}

    def setup(self):
        if self.update_rule not in _RULES:
            raise RtdError(Code.E_MODEL_INVALID, f"LinearAttention: update_rule {self.update_rule!r} is not one of {list(_RULES)}")
        if self.q_num_heads <= 0 or self.kv_num_heads <= 0 or self.q_num_heads % self.kv_num_heads:
            raise RtdError(Code.E_MODEL_INVALID, f"LinearAttention: {self.q_num_heads} query heads for {self.kv_num_heads} kv heads")
        self.gated = self.update_rule in ("gated", "gated_delta")
        self.delta = self.update_rule in ("delta", "gated_delta")

    def _refuse(self, detail: str):
        raise RtdError(Code.E_INPUT_INVALID, f"LinearAttention: {detail}")

    def run(self, query, key, value, past_state=None, decay=None, beta=None):
        xp = self.xp
        hq, hkv = self.q_num_heads, self.kv_num_heads
        if (decay is not None) != self.gated or (beta is not None) != self.delta:
            raise RtdError(Code.E_MODEL_INVALID, f"LinearAttention: update_rule {self.update_rule!r} with decay "
                                                 f"{'given' if decay is not None else 'absent'}, beta {'given' if beta is not None else 'absent'}")
        if query.ndim != 3 or key.ndim != 3 or value.ndim != 3 or query.shape[-1] % hq or value.shape[-1] % hkv:
            self._refuse(f"query {list(query.shape)}, key {list(key.shape)}, value {list(value.shape)}")
        b, t, _ = query.shape
        dk, dv = query.shape[-1] // hq, value.shape[-1] // hkv
        if key.shape != (b, t, hkv * dk) or value.shape[:2] != (b, t):
            self._refuse(f"query {list(query.shape)}, key {list(key.shape)}, value {list(value.shape)}")
        f32 = np.float32
        q = query.reshape(b, t, hkv, hq // hkv, dk).astype(f32)
        k = key.reshape(b, t, hkv, dk).astype(f32)
        v = value.reshape(b, t, hkv, dv).astype(f32)
        if self.gated:
            if decay.ndim != 3 or decay.shape[:2] != (b, t) or decay.shape[2] not in (hkv, hkv * dk):
                self._refuse(f"decay {list(decay.shape)}")
            gate = xp.exp(decay.astype(f32)).reshape(b, t, hkv, -1, 1)   # scales S's rows: per head or per key dimension
        if self.delta:
            if beta.ndim != 3 or beta.shape[:2] != (b, t) or beta.shape[2] not in (hkv, 1):
                self._refuse(f"beta {list(beta.shape)}")
            rate = beta.astype(f32).reshape(b, t, -1, 1)
        if past_state is not None and past_state.shape != (b, hkv, dk, dv):
            self._refuse(f"past_state {list(past_state.shape)} for ({b}, {hkv}, {dk}, {dv})")
        state = xp.zeros((b, hkv, dk, dv), f32) if past_state is None else past_state.astype(f32)   # a copy: updated below
        scale = f32(self.scale) if self.scale else f32(1 / np.sqrt(dk))
        out = xp.empty((b, t, hkv, hq // hkv, dv), f32)
        for i in range(t):
            if self.gated:
                state *= gate[:, i]
            v_i = v[:, i]
            if self.delta:
                v_i = rate[:, i] * (v_i - xp.einsum("bhkv,bhk->bhv", state, k[:, i]))
            state += k[:, i, :, :, None] * v_i[:, :, None, :]
            out[:, i] = xp.matmul(q[:, i], state)
        out *= scale
        return (out.reshape(b, t, hq * dv).astype(query.dtype, copy=False),
                state.astype(query.dtype if past_state is None else past_state.dtype, copy=False))
