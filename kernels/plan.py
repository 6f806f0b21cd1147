"""An executable plan for one shape signature: slot-indexed steps over a per-thread frame.

Values live in a flat list (the frame) at indices fixed at build time, so the hot loop does
no name lookups. Fused kernels get their output (and scratch) buffers as extra arguments:
views into a per-thread arena placed by `memory.place`, so a run allocates nothing for them.
A value that may escape (a graph output or a view of one) is never given arena bytes.
"""
import threading
import time

import numpy as np

from .fused import Fused
from .graph import make_kernel
from .ir import Graph
from .memory import Aliases, Request, place
from .partition import HOST, TRANSFER_DOMAIN, Transfer


class Plan:
    """`where` (kernels/partition.apply): per node, HOST for one that runs on NumPy in a device
    plan; transfer nodes copy through `transfers` (the device's copy stream)."""

    def __init__(self, graph: Graph, shapes: dict, static: set, xp=np, where: list | None = None, transfers=None):
        self.graph, self.xp = graph, xp
        self.where = where or []
        self.partitioned = HOST in self.where
        names = ["", "#discard"] + list(graph.constants) + [n for n in graph.inputs if n not in graph.constants]
        names += [o for node in graph.nodes for o in node.outputs if o and o not in names]
        names += sorted({n for node in graph.nodes for n in node.inputs + node.implicit if n} - set(names))
        self.names = names
        self.slot = {name: i for i, name in enumerate(names)}  # "" → slot 0, always None
        self.input_slots = [self.slot[n] for n in graph.inputs]
        self.output_slots = [self.slot[n] for n in graph.outputs]
        self.constant_slots = {self.slot[n] for n in graph.constants}
        on_host = [w == HOST for w in self.where] or [False] * len(graph.nodes)
        kernels = [Transfer(node.op_type, transfers) if node.domain == TRANSFER_DOMAIN else
                   make_kernel(node, graph.opsets, np if host else xp) for node, host in zip(graph.nodes, on_host)]
        self.host_constants = {n for node, host in zip(graph.nodes, on_host) if host
                               for n in node.inputs + node.implicit if n in graph.constants}
        buffers = self._buffers(kernels, shapes, static)
        frees = self._frees()
        self.labels, self.steps = [], []
        for step, (node, kernel) in enumerate(zip(graph.nodes, kernels)):
            args = tuple(self.slot[n] for n in node.inputs + node.implicit)
            if isinstance(kernel, Fused):  # buffers follow the full positional arity
                args += (0,) * (kernel.arity - len(args)) + tuple(buffers[step])
            outs = tuple(self.slot[o] if o else 1 for o in node.outputs)
            self.steps.append((self._call(kernel, node), args, outs, frees[step]))
            links = node.attrs.get("links") if node.op_type == "ElementwiseChain" else None
            self.labels.append(f"{node.op_type}({'+'.join(n.op_type for n, _ in links)})" if links else node.op_type)
        self._local = threading.local()

    @staticmethod
    def _call(kernel, node):
        if not kernel.needs_scope:
            return kernel.run
        n_in, names = len(node.inputs), node.implicit
        # subgraphs read outer names through a mapping; those values arrive as trailing args
        return lambda *args: kernel.run(*args[:n_in], scope=dict(zip(names, args[n_in:])))

    def _buffers(self, kernels, shapes, static) -> list:
        """Arena requests for fused kernels' buffers; per step, the slots that will hold their views."""
        nodes = self.graph.nodes
        aliases = Aliases(len(self.names))
        last_use = {}
        for step, (node, kernel) in enumerate(zip(nodes, kernels)):
            for n in node.inputs + node.implicit:
                last_use[self.slot[n]] = step
            if not isinstance(kernel, Fused):  # its results may be views of (or hold) its inputs
                for o in node.outputs:
                    for n in node.inputs + node.implicit:
                        if o and n:
                            aliases.union(self.slot[o], self.slot[n])
        escaping = {aliases.find(s) for s in self.output_slots}
        class_end: dict = {}
        for s, step in last_use.items():
            root = aliases.find(s)
            class_end[root] = max(class_end.get(root, -1), step)
        self.requests, self.buffer_slots, per_step = [], [], []
        for step, (node, kernel) in enumerate(zip(nodes, kernels)):
            slots = []
            out = node.outputs[0] if node.outputs else ""
            info = shapes.get(out) if out in static else None
            for k in range(len(kernel.buffers) if isinstance(kernel, Fused) else 0):
                root = aliases.find(self.slot[out])
                if info is None or (k == 0 and root in escaping):
                    slots.append(0)  # none planned: the kernel allocates
                    continue
                shape, dtype = kernel.buffer_shape(k, [shapes.get(n) for n in node.inputs], info)
                end = max(class_end.get(root, step), step) if k == 0 else step
                self.requests.append((Request(int(np.prod(shape)) * np.dtype(dtype).itemsize, step, end), tuple(shape), dtype))
                self.names.append(f"{out}#buffer{k}")
                self.buffer_slots.append(len(self.names) - 1)
                slots.append(len(self.names) - 1)
            per_step.append(slots)
        self.peak_bytes = place([r for r, _, _ in self.requests])
        self.naive_bytes = sum(r.nbytes for r, _, _ in self.requests)
        return per_step

    def _frees(self) -> list:
        """Per step, the slots whose values no later step reads (dropped so memory returns early)."""
        last = {}
        for step, node in enumerate(self.graph.nodes):
            for n in node.inputs + node.implicit + node.outputs:
                if n:
                    last[self.slot[n]] = step
        keep = set(self.output_slots) | self.constant_slots
        frees = [[] for _ in self.graph.nodes]
        for s, step in last.items():
            if s not in keep:
                frees[step].append(s)
        return [tuple(f) for f in frees]

    def _template(self) -> list:
        """This thread's frame template: constants and arena views in their slots."""
        template = getattr(self._local, "template", None)
        if template is None:
            template = [None] * len(self.names)
            for name, value in self.graph.constants.items():
                template[self.slot[name]] = np.asarray(value) if name in self.host_constants else self.xp.asarray(value)
            arena = self.xp.empty(max(self.peak_bytes, 1), np.uint8)
            for slot, (req, shape, dtype) in zip(self.buffer_slots, self.requests):
                template[slot] = arena[req.offset : req.offset + req.nbytes].view(dtype).reshape(shape)
            self._local.template = template
        return template

    def run(self, feeds: list, profile=None) -> list:
        frame = list(self._template())
        for slot, value in zip(self.input_slots, feeds):
            frame[slot] = value
        if profile is None:
            for fn, args, outs, frees in self.steps:
                results = fn(*[frame[i] for i in args])
                if len(outs) == 1:
                    frame[outs[0]] = results[0]
                else:
                    for i, value in zip(outs, results):
                        frame[i] = value
                for i in frees:
                    frame[i] = None
        else:
            clock = time.perf_counter_ns
            for label, (fn, args, outs, frees) in zip(self.labels, self.steps):
                start = clock()
                for i, value in zip(outs, fn(*[frame[i] for i in args])):
                    frame[i] = value
                for i in frees:
                    frame[i] = None
                profile.record(label, start, clock())
        return [frame[i].copy() if i in self.constant_slots else frame[i] for i in self.output_slots]

    def stats(self) -> dict:
        ops: dict = {}
        for node in self.graph.nodes:
            ops[node.op_type] = ops.get(node.op_type, 0) + 1
        return {"steps": len(self.steps), "planned_buffers": len(self.requests), "peak_bytes": self.peak_bytes,
                "naive_bytes": self.naive_bytes, "ops": ops, "host_steps": self.where.count(HOST)}
