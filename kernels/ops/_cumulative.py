"""Cumulative: the shared base of CumSum and CumProd (inclusive or exclusive, either direction).

NumPy's `accumulate` runs element by element (10-30x slower than a vectorized add). Along any
axis but the last, the running total is instead a loop of whole-slice ufunc calls, each over
the contiguous rest of the array; along the last axis (strided slices) `accumulate` stays.
"""
from ._axes import normalize_axis
from .base import Kernel

MIN_SLICE = 256  # elements per slice below which per-call overhead beats the vectorized loop


class Cumulative(Kernel):
    """`ufunc` names the xp function (add / multiply) that combines neighbours along `axis`."""

    attributes = {"exclusive": 0, "reverse": 0}
    ufunc: str

    def setup(self) -> None:
        self._ufunc = getattr(self.xp, self.ufunc)

    def run(self, x, axis):
        xp = self.xp
        axis = int(self.host(xp.asarray(axis)).reshape(-1)[0])  # a fed 0-d axis may be a NumPy scalar
        axis = normalize_axis(axis, x.ndim, self.op_type)
        if axis < x.ndim - 1 and x.size >= MIN_SLICE * x.shape[axis]:
            return (self._by_slices(x, axis),)
        return (self._accumulate(x, axis),)

    def _by_slices(self, x, axis):
        result = self.xp.empty_like(x)
        source, target = self.xp.moveaxis(x, axis, 0), self.xp.moveaxis(result, axis, 0)
        steps = range(len(source) - 1, -1, -1) if self.reverse else range(len(source))
        previous = None
        for i in steps:
            if previous is None:
                target[i] = self._ufunc.identity if self.exclusive else source[i]
            else:
                self._ufunc(target[previous], source[previous if self.exclusive else i], out=target[i])
            previous = i
        return result

    def _accumulate(self, x, axis):
        xp = self.xp
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
        return xp.flip(result, axis) if self.reverse else result
