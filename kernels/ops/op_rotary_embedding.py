"""RotaryEmbedding: rotate (half-split or interleaved) pairs of each head's first dims by cached angles."""
from .base import Kernel


class RotaryEmbedding_23(Kernel):
    attributes = {"interleaved": 0, "num_heads": 0, "rotary_embedding_dim": 0}

    def run(self, x, cos_cache, sin_cache, position_ids=None):
        xp = self.xp
        shape = x.shape
        if x.ndim == 4:  # (B, heads, S, D) -> (B, S, heads, D)
            x = x.transpose(0, 2, 1, 3)
        else:
            x = x.reshape(shape[0], shape[1], self.num_heads, -1)
        dim = self.rotary_embedding_dim or x.shape[-1]
        if position_ids is not None:
            cos_cache, sin_cache = cos_cache[position_ids], sin_cache[position_ids]
        cos, sin = cos_cache[:, :, None, :], sin_cache[:, :, None, :]
        out = x.copy()
        if self.interleaved:
            x1, x2 = x[..., 0:dim:2], x[..., 1:dim:2]
            out[..., 0:dim:2] = cos * x1 - sin * x2
            out[..., 1:dim:2] = sin * x1 + cos * x2
        else:
            half = dim // 2
            x1, x2 = x[..., :half], x[..., half:dim]
            out[..., :half] = cos * x1 - sin * x2
            out[..., half:dim] = sin * x1 + cos * x2
        if len(shape) == 4:
            return (xp.ascontiguousarray(out.transpose(0, 2, 1, 3)),)
        return (out.reshape(shape),)
