"""Loop: run `body` while the trip count and condition allow, carrying values and stacking scan outputs.

The body's scope values are bound once per Loop run; once an iteration shows that the body's plan gives
the carried values back with their own (static) shapes, later iterations run that plan directly, without
looking their signature up again (kernels/subgraph.PlannedSubgraph.steady)."""
import numpy as np

from .base import REQUIRED, Kernel


class Loop_1(Kernel):
    attributes = {"body": REQUIRED}
    needs_scope = True

    def run(self, trip_count=None, cond=None, *carried, scope=None):
        body = self.body
        limit = None if trip_count is None else int(self.host(trip_count).reshape(-1)[0])
        keep_going = True if cond is None else bool(self.host(cond).reshape(-1)[0])
        carried = list(carried)
        n_carried = len(carried)
        scans = [[] for _ in range(len(body.output_names) - 1 - n_carried)]
        bound = body.bind(scope)
        steady = None   # the plan every further iteration runs, once one iteration shows it
        i = 0
        while keep_going and (limit is None or i < limit):
            inputs = [np.array(i, dtype=np.int64), np.array(keep_going), *carried]
            if steady is not None:
                out = steady.run(inputs + bound)
            else:
                out = body.run(inputs, bound, scope)
                steady = body.steady(inputs + bound, n_carried)
            keep_going = bool(self.host(out[0]).reshape(-1)[0])
            carried = out[1 : 1 + n_carried]
            if steady is not None and not all(type(v) is np.ndarray for v in carried):
                steady = None   # a kernel's NumPy scalar (np.float32 from a reduction): the body runs it interpreted
            for acc, value in zip(scans, out[1 + n_carried :]):
                acc.append(value)
            i += 1
        first_scan = 1 + n_carried
        empty = [body.output_dtypes[first_scan + k] or np.float32 for k in range(len(scans))]  # zero iterations
        return (*carried, *(self.xp.stack(acc) if acc else self.xp.empty((0,), dtype) for acc, dtype in zip(scans, empty)))
