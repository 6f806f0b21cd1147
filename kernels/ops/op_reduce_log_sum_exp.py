"""ReduceLogSumExp: log(sum(exp(x))) over the given axes, shifted by the maximum so it cannot
overflow (axes as an input from opset 18)."""
from ._reduce import AxesFromAttribute, AxesFromInput, in_type_of, reduces_empty


class ReduceLogSumExp_18(AxesFromInput):
    def reduce(self, x, axes, keepdims):
        xp = self.xp
        if reduces_empty(x, axes):  # log(0)
            shape = xp.sum(x, axis=axes, keepdims=keepdims).shape
            return xp.full(shape, -float("inf"), dtype=x.dtype)
        work = x if x.dtype.kind == "f" else x.astype("float64")
        shift = xp.max(work, axis=axes, keepdims=True)
        shift[~xp.isfinite(shift)] = 0  # all -inf (or an inf) rows: no shift, exp gives 0 / inf
        terms = xp.subtract(work, shift)
        xp.exp(terms, out=terms)
        total = xp.sum(terms, axis=axes, keepdims=True)
        xp.log(total, out=total)
        total += shift
        if not keepdims:
            total = total.reshape(_without(total.shape, axes))
        return in_type_of(x, total)


def _without(shape, axes):
    """`shape` with the reduced axes dropped (None: all of them)."""
    return () if axes is None else tuple(n for i, n in enumerate(shape) if i not in axes)


class ReduceLogSumExp_1(AxesFromAttribute, ReduceLogSumExp_18):
    pass
