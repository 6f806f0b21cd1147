"""Cumulative: the shared base of CumSum and CumProd (inclusive or exclusive, either direction)."""
from ._axes import normalize_axis
from .base import Kernel


class Cumulative(Kernel):
    """`ufunc` names the xp function whose `accumulate` runs along the axis input."""

    attributes = {"exclusive": 0, "reverse": 0}
    ufunc: str

    def setup(self) -> None:
        self._ufunc = getattr(self.xp, self.ufunc)

    def run(self, x, axis):
        xp = self.xp
        axis = int(self.host(xp.asarray(axis)).reshape(-1)[0])  # a fed 0-d axis may be a NumPy scalar
        axis = normalize_axis(axis, x.ndim, self.op_type)
        work = xp.flip(x, axis) if self.reverse else x
        if self.exclusive:  # each position accumulates only what precedes it: shift by one
            result = xp.empty_like(x)
            head = [slice(None)] * x.ndim
            head[axis] = slice(0, 1)
            result[tuple(head)] = self._ufunc.identity
            if x.shape[axis] > 1:
                body, rest = list(head), list(head)
                body[axis], rest[axis] = slice(1, None), slice(0, -1)
                self._ufunc.accumulate(work[tuple(rest)], axis=axis, dtype=x.dtype, out=result[tuple(body)])
        else:
            result = self._ufunc.accumulate(work, axis=axis, dtype=x.dtype)
        return (xp.flip(result, axis) if self.reverse else result,)
