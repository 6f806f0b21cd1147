"""Scan: run `body` over slices of the scan inputs, carrying state and stacking scan outputs."""

from .base import REQUIRED, Kernel


def _scan(kernel, states, scans, in_axes, in_dirs, out_axes, out_dirs, length, scope):
    """One scan over unbatched inputs; `length` iterations."""
    body = kernel.body
    xp = kernel.xp
    n_state = len(states)
    names = body.input_names
    collected = [[] for _ in range(len(body.output_names) - n_state)]
    for t in range(length):
        feeds = dict(zip(names, states))
        for name, x, axis, direction in zip(names[n_state:], scans, in_axes, in_dirs):
            index = length - 1 - t if direction else t
            feeds[name] = xp.take(x, index, axis=axis)
        out = body(feeds, scope)
        states = out[:n_state]
        for acc, value in zip(collected, out[n_state:]):
            acc.append(value)
    results = []
    for acc, axis, direction in zip(collected, out_axes, out_dirs):
        if direction:
            acc = acc[::-1]
        results.append(xp.stack(acc, axis=axis if axis >= 0 else axis + acc[0].ndim + 1))
    return list(states), results


def _per(values, count, default=0):
    values = list(values or [])
    return values + [default] * (count - len(values))


class Scan_9(Kernel):
    attributes = {"body": REQUIRED, "num_scan_inputs": REQUIRED, "scan_input_axes": None,
                  "scan_input_directions": None, "scan_output_axes": None, "scan_output_directions": None}
    needs_scope = True

    def run(self, *args, scope=None):
        n_state = len(args) - self.num_scan_inputs
        scans = args[n_state:]
        in_axes = [a if a >= 0 else a + x.ndim for a, x in zip(_per(self.scan_input_axes, len(scans)), scans)]
        n_out = len(self.body.output_names) - n_state
        length = scans[0].shape[in_axes[0]]
        states, results = _scan(self, args[:n_state], scans, in_axes, _per(self.scan_input_directions, len(scans)),
                                _per(self.scan_output_axes, n_out), _per(self.scan_output_directions, n_out), length, scope)
        return (*states, *results)


class Scan_8(Kernel):
    """The batched form: axis 0 of states and scan inputs is a batch, axis 1 the sequence."""

    attributes = {"body": REQUIRED, "num_scan_inputs": REQUIRED, "directions": None}
    needs_scope = True

    def run(self, sequence_lens, *args, scope=None):
        n_state = len(args) - self.num_scan_inputs
        scans = args[n_state:]
        batch, length = scans[0].shape[0], scans[0].shape[1]
        lens = [length] * batch if sequence_lens is None else [int(v) for v in self.host(sequence_lens)]
        n_out = len(self.body.output_names) - n_state
        dirs = _per(self.directions, len(scans))
        per_batch = []
        for b in range(batch):
            states, results = _scan(self, [s[b] for s in args[:n_state]], [x[b] for x in scans], [0] * len(scans),
                                    dirs, [0] * n_out, [0] * n_out, lens[b], scope)
            results = [self.xp.pad(r, [(0, length - r.shape[0])] + [(0, 0)] * (r.ndim - 1)) for r in results]
            per_batch.append(states + results)
        return tuple(self.xp.stack([row[i] for row in per_batch]) for i in range(len(per_batch[0])))
