"""Variadic: the shared base of Max, Min, Sum and Mean, which fold a binary ufunc over N inputs."""
from .base import Elementwise


class Variadic(Elementwise):
    """Folds `ufunc` (an xp function name) over all inputs under multidirectional broadcasting.

    The result buffer is allocated once at the broadcast shape, and every step writes into it.
    """

    ufunc: str

    def setup(self) -> None:
        self._ufunc = getattr(self.xp, self.ufunc)

    def compute(self, *inputs, out=None):
        xp = self.xp
        if out is None:
            shape = xp.broadcast_shapes(*(x.shape for x in inputs))
            out = xp.empty(shape, dtype=xp.result_type(*inputs))
        if len(inputs) == 1:
            xp.copyto(out, inputs[0])
            return out
        first, second, *rest = inputs
        if any(out is x for x in rest):  # a later operand would be overwritten before it is read
            out[...] = self.compute(*inputs)
            return out
        self._ufunc(first, second, out=out)
        for x in rest:
            self._ufunc(out, x, out=out)
        return out
