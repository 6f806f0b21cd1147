"""ai.onnx.preview FlexAttention: scaled dot-product attention over (B, H, L, E) tensors with
optional modifier subgraphs: score_mod on the scaled scores (B, Hq, L, S) before the softmax over
S, prob_mod on the probabilities after it (each sees the enclosing scope, as If's branches do).

Query head h reads key/value head h // (Hq / Hkv), by a broadcast over a group axis rather than
a repeated copy of K and V. Scores, softmax and the product with V run in softmax_precision
(float32 for half-precision inputs, else the input's type); the result has V's type.
"""
import math

import numpy as np
from onnx import helper

from rtd.errors import Code, RtdError

from ._softmax import softmax
from .base import Kernel

PREVIEW_DOMAIN = "ai.onnx.preview"


class FlexAttention_1(Kernel):
    domain = PREVIEW_DOMAIN
    attributes = {"prob_mod": None, "score_mod": None, "scale": None, "softmax_precision": None}
    needs_scope = True

    def setup(self):
        for name in ("score_mod", "prob_mod"):
            body = getattr(self, name)
            if body is not None and (len(body.input_names) != 1 or len(body.output_names) != 1):
                raise RtdError(Code.E_MODEL_INVALID, f"FlexAttention: {name} must take one tensor and give one")
        self.precision = None
        if self.softmax_precision is not None:
            self.precision = np.dtype(helper.tensor_dtype_to_np_dtype(self.softmax_precision))
            if self.precision.kind not in "fV" or self.precision.itemsize not in (2, 4, 8):
                raise RtdError(Code.E_MODEL_INVALID, f"FlexAttention: softmax_precision {self.softmax_precision} is not a float type")

    def _modify(self, body, x, scope):
        if body is None:
            return x
        (y,) = body({body.input_names[0]: x}, scope)
        if y.shape != x.shape:
            raise RtdError(Code.E_MODEL_INVALID, f"FlexAttention: a modifier turned {list(x.shape)} into {list(y.shape)}")
        return y.astype(x.dtype, copy=False)

    def run(self, q, k, v, scope=None):
        xp = self.xp
        if q.ndim != 4 or k.ndim != 4 or v.ndim != 4 or k.shape[:3] != v.shape[:3] or q.shape[0] != k.shape[0] \
                or q.shape[3] != k.shape[3] or k.shape[1] == 0 or q.shape[1] % k.shape[1]:
            raise RtdError(Code.E_INPUT_INVALID, f"FlexAttention: Q {list(q.shape)}, K {list(k.shape)}, V {list(v.shape)}")
        batch, heads, length, width = q.shape
        kv_heads, span = k.shape[1], k.shape[2]
        work = self.precision or (np.dtype(np.float32) if q.dtype.itemsize < 4 else q.dtype)
        scale = work.type(1 / math.sqrt(width) if self.scale is None else self.scale)
        grouped = q.astype(work, copy=False).reshape(batch, kv_heads, heads // kv_heads, length, width)
        keys = k.astype(work, copy=False)[:, :, None]
        scores = xp.matmul(grouped, keys.swapaxes(-1, -2)).reshape(batch, heads, length, span)
        scores *= scale
        scores = self._modify(self.score_mod, scores, scope)
        with np.errstate(invalid="ignore"):   # a row masked to -inf everywhere is NaN, as in the reference
            probs = softmax(xp, scores, 3)
        probs = self._modify(self.prob_mod, probs, scope)
        out = xp.matmul(probs.reshape(batch, kv_heads, heads // kv_heads, length, span), v.astype(work, copy=False)[:, :, None])
        return (out.reshape(batch, heads, length, v.shape[3]).astype(v.dtype, copy=False),)
