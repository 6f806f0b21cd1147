"""Loop: run `body` while the trip count and condition allow, carrying values and stacking scan outputs.

The body's scope values are bound once per Loop run. Once the body's plan for an iteration's signature
gives the carried values back with their own (static) shapes and dtypes, every later iteration has that
signature too: they run that plan directly, without looking their signature up again; where that plan is one
compiled program and the body has no scan outputs, the remaining iterations run as one `Cycle` (kernels/plan.py):
a compiled call each, the carried values' arrays taken in turns."""
import numpy as np

from .base import REQUIRED, Kernel


class Loop_1(Kernel):
    attributes = {"body": REQUIRED}
    needs_scope = True

    def run(self, trip_count=None, cond=None, *carried, scope=None):
        body = self.body
        limit = None if trip_count is None else int(self.first(trip_count))
        keep_going = True if cond is None else bool(self.first(cond))
        carried = list(carried)
        n_carried = len(carried)
        scans = [[] for _ in range(len(body.output_names) - 1 - n_carried)]
        bound = body.bind(scope)
        going = np.array(True)   # every iteration's condition input: it runs only while the condition holds
        steady = None            # the plan every further iteration runs, once one iteration shows it
        i = 0
        while keep_going and (limit is None or i < limit):
            values = [np.array(i, dtype=np.int64), going, *carried, *bound]
            if steady is None:
                plan = body.plan(values)
                kept = None if plan is None else plan.output_specs[1 : 1 + n_carried]
                if kept is not None and None not in kept and kept == plan.input_specs[2 : 2 + n_carried]:
                    steady = plan
            if steady is not None:
                cycle = None if scans else steady.cycle(n_carried)
                if cycle is not None:   # this and the remaining iterations, one compiled call each
                    out, ran = cycle.run(values, i, limit)
                    keep_going, carried, i = bool(self.first(out[0])), out[1 : 1 + n_carried], i + ran
                    break
                out = steady.run(values)
            elif plan is not None:
                out = plan.run(values)
            else:
                out = body.run(values[: 2 + n_carried], bound, scope)
            keep_going = bool(self.first(out[0]))
            carried = out[1 : 1 + n_carried]
            if steady is not None:
                for value in carried:
                    if type(value) is not np.ndarray:   # a kernel's NumPy scalar (a reduction's np.float32): no plan takes it
                        steady = None
                        break
            for acc, value in zip(scans, out[1 + n_carried :]):
                acc.append(value)
            i += 1
        if not scans:
            return tuple(carried)
        first_scan = 1 + n_carried
        empty = [body.output_dtypes[first_scan + k] or np.float32 for k in range(len(scans))]  # zero iterations
        return (*carried, *(self.xp.stack(acc) if acc else self.xp.empty((0,), dtype) for acc, dtype in zip(scans, empty)))
