"""com.microsoft Attention (what onnxruntime's transformer optimizer emits): packed QKV projection,
multi-head scaled dot-product attention, key-padding / raw / 3-D masks, causal (unidirectional),
past and present key/value, additive attention_bias.

Masked scores get `mask_filter_value` added (not -inf), as onnxruntime does, so a fully masked
row averages its values instead of producing NaN.
"""
import numpy as np

from rtd.errors import Code, RtdError

from ._contrib import MsKernel


class Attention_1(MsKernel):
    attributes = {"num_heads": 0, "unidirectional": 0, "mask_filter_value": -10000.0, "scale": 0.0,
                  "qkv_hidden_sizes": None, "do_rotary": 0, "past_present_share_buffer": 0,
                  "rotary_embedding_dim": 0}

    def setup(self):
        if self.do_rotary or self.past_present_share_buffer:
            raise RtdError(Code.E_OP_UNSUPPORTED, "com.microsoft Attention: do_rotary / past_present_share_buffer")
        if self.num_heads <= 0:
            raise RtdError(Code.E_MODEL_INVALID, "com.microsoft Attention: num_heads must be positive")

    def run(self, x, weights, bias=None, mask_index=None, past=None, attention_bias=None, past_sequence_length=None):
        # past_sequence_length only matters with past_present_share_buffer, which setup refuses
        xp = self.xp
        batch, seq = x.shape[:2]
        heads = self.num_heads
        qh, kh, vh = self.qkv_hidden_sizes or [weights.shape[1] // 3] * 3
        qkv = xp.matmul(x.reshape(batch * seq, -1), weights)
        if bias is not None:
            qkv += bias
        qkv = qkv.reshape(batch, seq, -1)

        def split_heads(t, hidden):
            return t.reshape(batch, seq, heads, hidden // heads).transpose(0, 2, 1, 3)

        q = split_heads(qkv[..., :qh], qh)
        k = split_heads(qkv[..., qh:qh + kh], kh)
        v = split_heads(qkv[..., qh + kh:], vh)
        if past is not None:
            k, v = xp.concatenate((past[0], k), axis=2), xp.concatenate((past[1], v), axis=2)
        present = xp.stack((k, v))
        past_len, total = k.shape[2] - seq, k.shape[2]
        scale = self.scale or 1.0 / np.sqrt(qh // heads)
        scores = xp.matmul(q, k.transpose(0, 1, 3, 2))
        scores *= x.dtype.type(scale)
        scores += xp.asarray(self.mask_bias(mask_index, batch, seq, past_len, total, x.dtype))
        if attention_bias is not None:
            scores += attention_bias
        scores -= scores.max(axis=-1, keepdims=True)
        probs = xp.exp(scores, out=scores)
        probs /= probs.sum(axis=-1, keepdims=True)
        y = xp.matmul(probs, v).transpose(0, 2, 1, 3).reshape(batch, seq, vh)
        return y, present

    def mask_bias(self, mask_index, batch, seq, past_len, total, dtype):
        """(batch or 1, 1, seq, total) additive bias on the host: mask_filter_value where barred."""
        allowed = np.ones((batch, seq, total), bool)
        if mask_index is not None:
            m = self.host(mask_index)
            if m.ndim == 1 and m.shape[0] == batch:  # key lengths: right padding
                allowed &= np.arange(total)[None, None, :] < m[:, None, None]
            elif m.ndim == 1 and m.shape[0] == 2 * batch:  # end and start positions
                j = np.arange(total)[None, None, :]
                allowed &= (j < m[:batch, None, None]) & (j >= m[batch:, None, None])
            elif m.ndim == 2:  # raw 0/1 mask over every key
                allowed &= (m != 0)[:, None, :]
            elif m.ndim == 3:  # (batch, seq, total)
                allowed &= m != 0
            else:
                raise RtdError(Code.E_OP_UNSUPPORTED, f"com.microsoft Attention: mask_index of shape {m.shape}")
        if self.unidirectional:
            allowed &= np.arange(total)[None, :] <= np.arange(seq)[:, None] + past_len
        bias = np.where(allowed, 0.0, self.mask_filter_value).astype(dtype)
        return bias[:, None]
