"""Split along `axis` by sizes (attribute until 12, input from 13), or into equal parts.

Equal parts (no sizes) are as many as the node has outputs, or `num_outputs` (opset 18, the
last part smaller when uneven). Before 18 the count comes from the node: `Kernel.n_outputs`.
"""
import numpy as np

from rtd.errors import Code, RtdError

from ._axes import normalize_axis
from .base import Kernel


class Split_2(Kernel):
    attributes = {"axis": 0, "split": None}
    num_outputs = None

    def sizes(self, dim: int, split) -> list[int]:
        if split is not None:
            sizes = [int(s) for s in np.asarray(split).reshape(-1)]
        elif self.num_outputs is not None:
            chunk = -(-dim // self.num_outputs)
            sizes = [min(chunk, max(dim - i * chunk, 0)) for i in range(self.num_outputs)]
        elif self.n_outputs is not None:
            if dim % self.n_outputs:
                raise RtdError(Code.E_INPUT_INVALID, f"Split: {dim} does not split into {self.n_outputs} equal parts")
            sizes = [dim // self.n_outputs] * self.n_outputs
        else:
            raise RtdError(Code.E_OP_UNSUPPORTED, "Split into equal parts needs the node's output count")
        if sum(sizes) != dim or min(sizes) < 0:
            raise RtdError(Code.E_INPUT_INVALID, f"Split: sizes {sizes} for a dimension of {dim}")
        return sizes

    def split_by(self, x, split):
        axis = normalize_axis(self.axis, x.ndim, "Split")
        bounds = np.cumsum(self.sizes(x.shape[axis], split))[:-1].tolist()
        return tuple(self.xp.split(x, bounds, axis=axis))

    def run(self, x):
        return self.split_by(x, self.split)


class Split_13(Split_2):
    attributes = {"axis": 0}

    def run(self, x, split=None):
        return self.split_by(x, None if split is None else self.host(split))


class Split_18(Split_13):
    attributes = {"axis": 0, "num_outputs": None}
