"""An executable plan for one shape signature: slot-indexed steps over a per-thread frame.

Values live in a flat list (the frame) at indices fixed at build time, so the hot loop does
no name lookups. Fused kernels get their output (and scratch) buffers as extra arguments:
views into a per-thread arena placed by `memory.place`, so a run allocates nothing for them.
A value that may escape (a graph output or a view of one) is never given arena bytes.

On the CPU, steps the signature fixes and `emit` can express run natively, ordered so that they run
back to back where the graph allows (`grouped`): each run of consecutive such steps is one
`native.program.Segment`, a program the C interpreter runs in one call, its values in the same arena
(or, where they escape, in arrays made per run); Python runs only the other steps and hands values
across at the edges.
"""
import copy
import heapq
import math
import threading
import time

import numpy as np

from .emit import emit
from .fused import Fused
from .graph import make_kernel
from .ir import Graph
from .memory import Aliases, Request, place
from .native.program import Home, Scratch, Segment, Value
from .partition import HOST, TRANSFER_DOMAIN, Transfer


class Plan:
    """`where` (kernels/partition.apply): per node, HOST for one that runs on NumPy in a device
    plan; transfer nodes copy through `transfers` (the device's copy stream)."""

    def __init__(self, graph: Graph, shapes: dict, static: set, xp=np, where: list | None = None, transfers=None,
                 made: dict | None = None):
        self.graph, self.xp = graph, xp
        self.where = where or []
        self.partitioned = HOST in self.where
        named = dict.fromkeys(["", "#discard", "#arena", *graph.constants, *graph.inputs])   # ordered, without repeats
        named.update(dict.fromkeys(o for node in graph.nodes for o in node.outputs if o))
        names = list(named) + sorted({n for node in graph.nodes for n in node.inputs + node.implicit if n} - set(named))
        self.names = names
        self.slot = {name: i for i, name in enumerate(names)}  # "" → slot 0, always None
        self.input_slots = [self.slot[n] for n in graph.inputs]
        self.output_slots = [self.slot[n] for n in graph.outputs]
        self.constant_slots = {self.slot[n] for n in graph.constants}
        self.constant_outputs = any(n in graph.constants for n in graph.outputs)   # copied per run: the caller may write them
        # per input and output, (shape, dtype) where the signature fixes them, else None: a Loop runs its body's
        # plan without a signature lookup where the carried values' specs come back unchanged (ops/op_loop.py)
        def spec(n):
            if n in graph.constants:
                return tuple(np.shape(graph.constants[n])), np.asarray(graph.constants[n]).dtype
            return (tuple(shapes[n][0]), np.dtype(shapes[n][1])) if n in static and n in shapes else None
        self.input_specs, self.output_specs = [spec(n) for n in graph.inputs], [spec(n) for n in graph.outputs]
        on_host = [w == HOST for w in self.where] or [False] * len(graph.nodes)
        made = made or {}   # id(node) -> (node, its kernel) made at compile: a shareable one is used again

        def kernel_of(node, host):
            if node.domain == TRANSFER_DOMAIN:
                return Transfer(node.op_type, transfers)
            earlier = made.get(id(node))
            if earlier is not None and earlier[0] is node and getattr(earlier[1], "shareable", False) \
                    and earlier[1].xp is (np if host else xp):
                return earlier[1]
            return make_kernel(node, graph.opsets, np if host else xp)
        self.kernels = kernels = [kernel_of(node, host) for node, host in zip(graph.nodes, on_host)]   # one per node
        self.host_constants = {n for node, host in zip(graph.nodes, on_host) if host
                               for n in node.inputs + node.implicit if n in graph.constants}
        native = xp is np and not self.partitioned
        self.emitted = [emit(node, kernel, shapes, static, graph.constants) if native else None
                        for node, kernel in zip(graph.nodes, kernels)]
        order = grouped(graph.nodes, [e is not None for e in self.emitted])
        if order != sorted(order):
            self.graph = graph = copy.copy(graph)
            graph.nodes = [graph.nodes[i] for i in order]
            self.kernels = kernels = [kernels[i] for i in order]
            self.emitted = [self.emitted[i] for i in order]
        self.last_read = {n: step for step, node in enumerate(graph.nodes) for n in node.inputs + node.implicit if n}
        buffers = self._buffers(kernels, shapes, static)
        frees = self._frees()
        self.labels, self.steps, self.segments = [], [], []
        step = 0
        while step < len(graph.nodes):
            if self.emitted[step] is not None:
                end = step
                while end < len(graph.nodes) and self.emitted[end] is not None:
                    end += 1
                self._add_segment(step, end, shapes, frees)
                step = end
                continue
            node, kernel = graph.nodes[step], kernels[step]
            args = tuple(self.slot[n] for n in node.inputs + node.implicit)
            if isinstance(kernel, Fused):  # buffers follow the full positional arity
                args += (0,) * (kernel.arity - len(args)) + tuple(buffers[step])
            outs = tuple(self.slot[o] if o else 1 for o in node.outputs)
            self.steps.append((self._call(kernel, node), args, outs, frees[step]))
            self.segments.append(None)
            self.labels.append(self._label(node))
            step += 1
        self._local = threading.local()
        self._cycles: dict = {}   # Loop bodies' Cycle by carried count

    @staticmethod
    def _label(node) -> str:
        links = node.attrs.get("links") if node.op_type == "ElementwiseChain" else None
        return f"{node.op_type}({'+'.join(n.op_type for n, _ in links)})" if links else node.op_type

    @staticmethod
    def _call(kernel, node):
        if not kernel.needs_scope:
            return kernel.run
        n_in, names = len(node.inputs), node.implicit
        # subgraphs read outer names through a mapping; those values arrive as trailing args
        return lambda *args: kernel.run(*args[:n_in], scope=dict(zip(names, args[n_in:])))

    def _buffers(self, kernels, shapes, static) -> list:
        """Arena requests for fused kernels' buffers and natively computed values; per step, the slots
        that will hold fused buffers' views. Sets `homes` (where each natively computed value lives)."""
        nodes = self.graph.nodes
        aliases = Aliases(len(self.names))
        last_use = {}
        for step, (node, kernel) in enumerate(zip(nodes, kernels)):
            for n in node.inputs + node.implicit:
                last_use[self.slot[n]] = step
            emitted = self.emitted[step]
            if emitted is not None:   # only the views it declares share their input's bytes
                for out, (source, _) in emitted.aliases.items():
                    aliases.union(self.slot[out], self.slot[source])
            elif not isinstance(kernel, Fused):  # its results may be views of (or hold) its inputs
                for o in node.outputs:
                    for n in node.inputs + node.implicit:
                        if o and n:
                            aliases.union(self.slot[o], self.slot[n])
        escaping = {aliases.find(s) for s in self.output_slots}
        class_end: dict = {}
        for s, step in last_use.items():
            root = aliases.find(s)
            class_end[root] = max(class_end.get(root, -1), step)
        self.requests, self.views, per_step = [], [], []   # views: (slot, request or array or None, byte offset, shape, dtype)
        native_values, self.scratch = {}, {}   # name -> its request (None: made per run); step -> {key: request}
        for step, (node, kernel) in enumerate(zip(nodes, kernels)):
            slots = []
            out = node.outputs[0] if node.outputs else ""
            emitted = self.emitted[step]
            if emitted is not None:
                for o in node.outputs:
                    if not o or o in emitted.aliases:
                        continue
                    root = aliases.find(self.slot[o])
                    if root in escaping:
                        native_values[o] = None
                        continue
                    shape, dtype = shapes[o]
                    request = Request(max(int(np.prod(shape)) * np.dtype(dtype).itemsize, 1), step, max(class_end.get(root, step), step))
                    self.requests.append(request)
                    native_values[o] = request
                scratch = {}
                for op in emitted.ops:
                    for operand in op.operands:
                        if isinstance(operand.ref, Scratch) and operand.ref.key not in scratch:
                            scratch[operand.ref.key] = request = Request(max(operand.ref.nbytes, 1), step, step)
                            self.requests.append(request)
                self.scratch[step] = scratch
            info = shapes.get(out) if out in static else None
            for k in range(len(kernel.buffers) if isinstance(kernel, Fused) and emitted is None else 0):
                root = aliases.find(self.slot[out])
                if info is None or (k == 0 and root in escaping):
                    slots.append(0)  # none planned: the kernel allocates
                    continue
                shape, dtype = kernel.buffer_shape(k, [shapes.get(n) for n in node.inputs], info)
                end = max(class_end.get(root, step), step) if k == 0 else step
                request = Request(int(np.prod(shape)) * np.dtype(dtype).itemsize, step, end)
                self.requests.append(request)
                self.names.append(f"{out}#buffer{k}")
                self.views.append((len(self.names) - 1, request, 0, tuple(shape), dtype))
                slots.append(len(self.names) - 1)
            per_step.append(slots)
        self.peak_bytes = place(self.requests)
        self.naive_bytes = sum(r.nbytes for r in self.requests)
        self.homes = self._homes(native_values, shapes)
        return per_step

    def _homes(self, native_values: dict, shapes: dict) -> dict:
        """Where each value a native step names lives (Home) plan-wide: constants, natively computed values
        (the arena, or made per run: "fresh"), declared views followed to their source, the rest in the frame.
        An arena or constant home that a Python step or the graph's outputs read gets a view in the template."""
        homes = {name: Home("constant", value, 0) for name, value in self.graph.constants.items()}
        for node, emitted in zip(self.graph.nodes, self.emitted):
            for o in node.outputs:
                if not o:
                    continue
                if emitted is None:
                    homes[o] = Home("frame", o, 0)
                elif o in emitted.aliases:
                    source, offset = emitted.aliases[o]
                    home = homes.get(source, Home("frame", source, 0))
                    homes[o] = Home(home.base, home.key, home.offset + offset)
                elif native_values[o] is None:
                    homes[o] = Home("fresh", o, 0)
                else:
                    homes[o] = Home("arena", None, native_values[o].offset)
        read_by_python = {n for node, emitted in zip(self.graph.nodes, self.emitted) if emitted is None
                          for n in node.inputs + node.implicit if n} | set(self.graph.outputs)
        for node, emitted in zip(self.graph.nodes, self.emitted):
            for o in node.outputs if emitted is not None else ():
                home = homes.get(o)
                if o and o in read_by_python and home.base in ("arena", "constant"):
                    shape, dtype = shapes[o]
                    self.views.append((self.slot[o], None if home.base == "arena" else home.key, home.offset, tuple(shape), dtype))
        return homes

    def _segment_homes(self, first: int, end: int, names: set) -> dict:
        """The homes of `names` as the program of steps [first, end) sees them: a value from outside it is
        read where it lives if that is the arena or a constant, else from the frame as itself; inside, views
        follow their sources and fresh values are the segment's own."""
        produced = {o: step for step in range(first, end) for o in self.graph.nodes[step].outputs if o}
        local: dict = {}

        def home(name: str) -> Home:
            if name in local:
                return local[name]
            found = self.homes.get(name, Home("frame", name, 0))
            if name not in produced:
                found = found if found.base in ("arena", "constant") else Home("frame", name, 0)
            elif name in self.emitted[produced[name]].aliases:
                source, offset = self.emitted[produced[name]].aliases[name]
                base = home(source)
                found = Home(base.base, base.key, base.offset + offset)
            local[name] = found
            return found
        return {name: home(name) for name in names}

    def _add_segment(self, first: int, end: int, shapes: dict, frees: list) -> None:
        """Steps [first, end) as one program step."""
        nodes = self.graph.nodes[first:end]
        ops, labels, scratch = [], [], {}
        for step, node in zip(range(first, end), nodes):
            emitted = self.emitted[step]
            renamed = {key: f"{step}:{key}" for key in self.scratch.get(step, {})}
            for key, request in self.scratch.get(step, {}).items():
                scratch[renamed[key]] = request.offset
            for op in emitted.ops:
                ops.append(op._replace(operands=tuple(
                    o._replace(ref=Scratch(renamed[o.ref.key], o.ref.nbytes)) if isinstance(o.ref, Scratch) else o
                    for o in op.operands)))
                labels.append((self._label(node), step))
        produced = {o for node in nodes for o in node.outputs if o}
        # what a later step or the caller reads (not a scan of every later node per segment: quadratic
        # in a 6,000-node unrolled decoder)
        later = {o for o in produced if self.last_read.get(o, -1) >= end} | (produced & set(self.graph.outputs))
        referenced = {o.ref.name for op in ops for o in op.operands if isinstance(o.ref, Value)}
        homes = self._segment_homes(first, end, referenced | (produced & later))
        exports = [o for o in sorted(produced & later, key=self.slot.get) if homes[o].base in ("fresh", "frame")]
        externals = sorted({h.key for h in homes.values() if h.base == "frame"}, key=self.slot.get)
        fresh = sorted({h.key for h in homes.values() if h.base == "fresh"}, key=self.slot.get)
        constants = self.graph.constants
        specs = {n: (tuple(constants[n].shape), constants[n].dtype) if n in constants else (tuple(shapes[n][0]), np.dtype(shapes[n][1]))
                 for n in set(homes) | set(externals) | set(fresh)}
        segment = Segment(ops, labels, homes, specs, scratch, externals, fresh, exports)
        args = (self.slot["#arena"],) + tuple(self.slot[n] for n in externals)
        outs = tuple(self.slot[n] for n in exports)
        dying = tuple(sorted({s for step in range(first, end) for s in frees[step]}))
        self.steps.append((segment.run, args, outs, dying))
        self.segments.append(segment)
        self.labels.append("+".join(sorted({self._label(node) for node in nodes})))

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
        """This thread's frame template: constants, the arena and views of it in their slots."""
        template = getattr(self._local, "template", None)
        if template is None:
            template = [None] * len(self.names)
            for name, value in self.graph.constants.items():
                template[self.slot[name]] = np.asarray(value) if name in self.host_constants else self.xp.asarray(value)
            arena = self.xp.empty(max(self.peak_bytes, 1), np.uint8)
            template[self.slot["#arena"]] = arena
            for slot, base, offset, shape, dtype in self.views:   # base: a Request, a constant array, or None (the arena)
                if isinstance(base, Request):
                    base, offset = None, base.offset + offset
                source = arena if base is None else np.asarray(base).reshape(-1).view(np.uint8)
                nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
                template[slot] = source[offset : offset + nbytes].view(dtype).reshape(shape)
            self._local.template = template
        return template

    def run(self, feeds: list, profile=None) -> list:
        frame = list(self._local.__dict__.get("template") or self._template())
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
            for label, segment, (fn, args, outs, frees) in zip(self.labels, self.segments, self.steps):
                start = clock()
                if segment is not None:   # its ops timed one by one, under their nodes' labels
                    results = segment.run_profiled(profile, *[frame[i] for i in args])
                else:
                    results = fn(*[frame[i] for i in args])
                    profile.record(label, start, clock())
                for i, value in zip(outs, results):
                    frame[i] = value
                for i in frees:
                    frame[i] = None
        if self.constant_outputs:
            return [frame[i].copy() if i in self.constant_slots else frame[i] for i in self.output_slots]
        return [frame[i] for i in self.output_slots]

    def cycle(self, n_carried: int) -> "Cycle | None":
        """How a Loop runs further iterations of this body plan in one compiled call each (`Cycle`), or None
        where the plan is not one native program, has scan outputs or computes a carried value other than into
        an array of its own. Worked out once."""
        if n_carried not in self._cycles:
            self._cycles[n_carried] = Cycle.of(self, n_carried)
        return self._cycles[n_carried]

    def stats(self) -> dict:
        ops: dict = {}
        for node in self.graph.nodes:
            ops[node.op_type] = ops.get(node.op_type, 0) + 1
        native = sum(e is not None for e in self.emitted)
        timed = sum(1 if s is None else len(s.nodes) for s in self.segments)   # what a profiled run records
        return {"steps": len(self.steps), "timed_steps": timed, "planned_buffers": len(self.requests), "peak_bytes": self.peak_bytes,
                "naive_bytes": self.naive_bytes, "ops": ops, "host_steps": self.where.count(HOST),
                "native_nodes": native, "native_segments": sum(s is not None for s in self.segments)}


class Cycle:
    """A Loop body's plan run for many iterations as one native program (`Segment.cycle`): the body's inputs are
    (iteration number, condition, carried values, scope values), its outputs (condition, carried values). Each
    carried value is passed through or computed into a fresh array of its own, which the next iteration reads;
    the condition is passed through or exported."""

    def __init__(self, plan: Plan, segment: Segment, feedback: list, counter, condition, outputs: list):
        self.plan, self.segment, self.feedback, self.counter, self.condition = plan, segment, feedback, counter, condition
        self.outputs = outputs   # per body output: ("export", index), ("input", index) or ("true", None)
        self.arena = plan.slot["#arena"]
        # per external the program reads: its index among the body's inputs, or None and its slot in the template
        self.sources = [(plan.input_slots.index(slot) if slot in plan.input_slots else None, slot)
                        for slot in plan.steps[0][1][1:]]

    @classmethod
    def of(cls, plan: Plan, n_carried: int) -> "Cycle | None":
        if len(plan.steps) != 1 or plan.segments[0] is None or len(plan.output_slots) != 1 + n_carried:
            return None
        segment, (_, args, outs, _) = plan.segments[0], plan.steps[0]
        externals, n_external = args[1:], len(args) - 1
        outputs, feedback, fed = [], [], set()
        for k, slot in enumerate(plan.output_slots):
            source = plan.input_slots[1 + k]   # the condition's input, then each carried value's
            if k == 0 and slot in plan.constant_slots and np.all(plan.graph.constants[plan.names[slot]]):
                outputs.append(("true", None))   # a constant true condition (the TorchScript exporter's)
                continue
            if slot == source:
                outputs.append(("input", 1 + k))
                continue
            if slot not in outs:
                return None
            export = outs.index(slot)
            outputs.append(("export", export))
            if k == 0:
                continue
            key, offset, shape, dtype, size = segment.export_info[export]
            fresh = key - n_external
            if fresh < 0 or offset or fresh in fed or math.prod(segment.fresh_info[fresh][2]) != size:
                return None
            fed.add(fresh)
            if source in externals:
                feedback.append((externals.index(source), fresh))
        condition = outputs[0][1] if outputs[0][0] == "export" else None
        if condition is not None and segment.export_info[condition][0] - n_external in fed:
            return None
        counter = externals.index(plan.input_slots[0]) if plan.input_slots[0] in externals else None
        return cls(plan, segment, feedback, counter, condition, outputs)

    def run(self, values: list, first: int, limit: int | None) -> tuple:
        """The body's outputs after iterations `first` … (until `limit` or a false condition) from the inputs
        `values` (in the plan's input order), and the iterations run."""
        template = self.plan._local.__dict__.get("template") or self.plan._template()
        externals = [values[k] if k is not None else template[slot] for k, slot in self.sources]
        exports, ran = self.segment.cycle(template[self.arena], externals, self.feedback, self.counter, self.condition,
                                          first, limit)
        return [exports[k] if kind == "export" else values[k] if kind == "input" else np.array(True)
                for kind, k in self.outputs], ran


def grouped(nodes: list, native: list) -> list:
    """An order of the nodes (their indices) in which native steps run back to back where the graph
    allows: each run of them is one program call, and a Python step between two used to split the
    program (a Loop body's scalar counter steps cut an LSTM cell into four calls per iteration).
    Producers stay before their readers and Python steps keep their own order (random ops draw in
    turn); among what is ready the earliest node goes first, so a graph of one kind keeps its order.
    Each kind runs while any of it is ready, so a Python step a native one unlocks waits for the rest of
    the native run."""
    producer = {o: i for i, node in enumerate(nodes) for o in node.outputs if o}
    readers: list = [[] for _ in nodes]
    waits = [0] * len(nodes)
    previous_python = None
    for i, node in enumerate(nodes):
        before = {producer[n] for n in node.inputs + node.implicit if n in producer and producer[n] < i}
        if not native[i]:
            if previous_python is not None:
                before.add(previous_python)
            previous_python = i
        for j in before:
            readers[j].append(i)
        waits[i] = len(before)
    ready: tuple = ([], [])   # heaps of node indices: Python steps, native steps
    for i, count in enumerate(waits):
        if count == 0:
            heapq.heappush(ready[native[i]], i)
    order: list = []
    kind = not ready[False]   # Python first: a graph's first Python steps (shapes, indices) tend to feed its native ones
    while ready[0] or ready[1]:
        if not ready[kind]:
            kind = not kind
        i = heapq.heappop(ready[kind])
        order.append(i)
        for j in readers[i]:
            waits[j] -= 1
            if waits[j] == 0:
                heapq.heappush(ready[native[j]], j)
    return order
