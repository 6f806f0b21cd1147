"""Add, Sub, Mul, Div before opset 7 and Pow before opset 7: B broadcasts onto A only when
`broadcast` is 1, its dims aligned with A's from `axis` on (with the trailing dims when `axis`
is absent, NumPy's way); opset 1's `consumed_inputs` was an in-place hint and changes nothing."""


class LegacyBroadcast:
    """Mixed in before an opset-7 kernel: aligns B, then computes as that kernel does."""

    attributes = {"broadcast": 0, "axis": None, "consumed_inputs": None}
    cuda = None  # generated GPU chains broadcast NumPy's way; these run their own compute

    def compute(self, a, b, out=None):
        if self.broadcast and self.axis is not None and b.ndim:
            axis = self.axis + a.ndim if self.axis < 0 else self.axis
            b = b.reshape(b.shape + (1,) * (a.ndim - axis - b.ndim))
        return super().compute(a, b, out=out)
