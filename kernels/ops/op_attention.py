"""Attention (opset 23+): scaled dot-product attention with MHA/GQA/MQA heads, KV cache, boolean or
additive masks, bottom-right causal alignment, softcap, sliding windows and the qk debug output.

The arithmetic follows the ONNX function body step for step and in the same dtypes (sqrt(scale)
applied to Q and K in the input type, softmax optionally in `softmax_precision`), so fp16 results
agree with the reference; fully masked rows give zeros, never NaN.
"""
import numpy as np

from rtd.errors import Code, RtdError

from ._quant import onnx_dtype
from .base import Kernel


def _heads(x, heads):
    """(B, S, heads * D) -> (B, heads, S, D)."""
    b, s, hidden = x.shape
    return x.reshape(b, s, heads, hidden // heads).transpose(0, 2, 1, 3)


def _frontier(q_len, kv_len, offset, allowed_fn):
    """-inf/0 bias from `allowed_fn(diff)` where diff = (i + offset) - j; offset scalar or per batch."""
    i = np.arange(q_len).reshape(-1, 1)
    j = np.arange(kv_len).reshape(1, -1)
    if np.ndim(offset):
        return allowed_fn((i + np.reshape(offset, (-1, 1, 1))) - j).reshape(-1, 1, q_len, kv_len)
    return allowed_fn(i + int(offset) - j)


class Attention_23(Kernel):
    attributes = {"is_causal": 0, "kv_num_heads": 0, "q_num_heads": 0, "qk_matmul_output_mode": 0,
                  "scale": None, "softcap": 0.0, "softmax_precision": 0}
    left_window_size = right_window_size = -1

    def run(self, q, k, v, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None):
        xp = self.xp
        if (past_key is None) != (past_value is None):
            raise RtdError(Code.E_INPUT_INVALID, "Attention: past_key and past_value go together")
        three_d = q.ndim == 3
        if three_d:
            q, k, v = _heads(q, self.q_num_heads), _heads(k, self.kv_num_heads), _heads(v, self.kv_num_heads)
        scale = self.scale if self.scale is not None else 1 / np.sqrt(q.shape[3])
        root = q.dtype.type(np.sqrt(scale))
        if past_key is not None:
            k, v = xp.concatenate((past_key, k), axis=2), xp.concatenate((past_value, v), axis=2)
        present_key, present_value = k, v
        q_len, kv_len = q.shape[2], k.shape[2]
        bias = self.bias(q.dtype, q_len, kv_len, attn_mask, past_key, nonpad_kv_seqlen, q.shape[0])
        if q.shape[1] != k.shape[1]:  # grouped-query: each KV head serves q_heads / kv_heads query heads
            reps = q.shape[1] // k.shape[1]
            k, v = xp.repeat(k, reps, axis=1), xp.repeat(v, reps, axis=1)
        scores = xp.matmul(q * root, (k * root).transpose(0, 1, 3, 2)).astype(q.dtype, copy=False)
        if self.softcap > 0:
            scores = xp.tanh(scores / q.dtype.type(self.softcap)) * q.dtype.type(self.softcap)
        biased = scores + xp.asarray(bias)
        qk_out = biased if self.qk_matmul_output_mode == 2 else scores
        if self.softmax_precision:
            biased = biased.astype(onnx_dtype(self.softmax_precision))
        probs = self.softmax(biased)
        masked_rows = xp.asarray(np.isneginf(np.max(bias, axis=-1, keepdims=True)))
        probs = xp.where(masked_rows, probs.dtype.type(0), probs)
        if self.qk_matmul_output_mode == 3:
            qk_out = probs
        y = xp.matmul(probs.astype(q.dtype), v).astype(q.dtype, copy=False)  # bfloat16 matmul yields float32
        if three_d:
            y = y.transpose(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], -1)
        return y, present_key, present_value, qk_out.astype(q.dtype)

    def softmax(self, x):
        xp = self.xp
        top = x.max(axis=-1, keepdims=True)
        e = xp.exp(x - xp.where(xp.isneginf(top), x.dtype.type(0), top))
        total = e.sum(axis=-1, keepdims=True)
        return e / xp.where(total == 0, x.dtype.type(1), total)

    def bias(self, dtype, q_len, kv_len, mask, past_key, nonpad, batch):
        """The additive bias (host NumPy): mask, causal frontier, window and padding, -inf where barred."""
        neg, zero = dtype.type(-np.inf), dtype.type(0)
        mask = None if mask is None else self.host(mask)
        if mask is not None and mask.shape[-1] < kv_len:
            pad = [(0, 0)] * (mask.ndim - 1) + [(0, kv_len - mask.shape[-1])]
            mask = np.pad(mask, pad, constant_values=False if mask.dtype == np.bool_ else -np.inf)
        if mask is not None and mask.dtype == np.bool_:
            mask = np.where(mask, zero, neg)
        bias = np.zeros((q_len, kv_len), dtype) if mask is None else np.zeros((q_len, kv_len), dtype) + mask
        nonpad = None if nonpad is None else self.host(nonpad).reshape(-1)
        offset = past_key.shape[2] if past_key is not None else (nonpad - q_len if nonpad is not None else 0)
        if self.is_causal:
            bias = bias + _frontier(q_len, kv_len, offset, lambda d: np.where(d >= 0, zero, neg))
        left, right = self.left_window_size, self.right_window_size
        if left >= 0 or right >= 0:
            def window(d):
                ok = np.ones(d.shape, bool)
                if left >= 0:
                    ok &= d <= left
                if right >= 0:
                    ok &= -d <= right
                return np.where(ok, zero, neg)
            bias = bias + _frontier(q_len, kv_len, offset, window)
        if nonpad is not None:
            padding = np.arange(kv_len) < nonpad[:, None]
            bias = bias + np.where(padding, zero, neg).reshape(batch, 1, 1, kv_len)
        return bias


class Attention_25(Attention_23):
    """Adds sliding windows (left_window_size, right_window_size; -1 leaves a side open)."""

    attributes = {**Attention_23.attributes, "left_window_size": -1, "right_window_size": -1}
