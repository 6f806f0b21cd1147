"""Loop: run `body` while the trip count and condition allow, carrying values and stacking scan outputs."""
import numpy as np

from .base import REQUIRED, Kernel


class Loop_1(Kernel):
    attributes = {"body": REQUIRED}
    needs_scope = True

    def run(self, trip_count=None, cond=None, *carried, scope=None):
        body = self.body
        names = body.input_names
        limit = None if trip_count is None else int(self.host(trip_count).reshape(-1)[0])
        keep_going = True if cond is None else bool(self.host(cond).reshape(-1)[0])
        carried = list(carried)
        scans = [[] for _ in range(len(body.output_names) - 1 - len(carried))]
        i = 0
        while keep_going and (limit is None or i < limit):
            feeds = dict(zip(names[2:], carried))
            feeds[names[0]] = np.array(i, dtype=np.int64)
            feeds[names[1]] = np.array(keep_going)
            out = body(feeds, scope)
            keep_going = bool(self.host(out[0]).reshape(-1)[0])
            carried = out[1 : 1 + len(carried)]
            for acc, value in zip(scans, out[1 + len(carried) :]):
                acc.append(value)
            i += 1
        first_scan = 1 + len(carried)
        empty = [body.output_dtypes[first_scan + k] or np.float32 for k in range(len(scans))]  # zero iterations
        return (*carried, *(self.xp.stack(acc) if acc else self.xp.empty((0,), dtype) for acc, dtype in zip(scans, empty)))
