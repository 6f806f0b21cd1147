"""Pipeline stages: one ONNX model cut into K consecutive parts, each served by a worker of its
own, so that K requests are in flight at once, one per part.

Costs. Each top-level node's cost is estimated from the shapes of one run: its FLOPs (the matrix,
convolution and recurrent ops by their multiply-adds, every other op one per output element) and
the bytes it reads and writes, at FLOPS_PER_NS and BYTES_PER_NS; the same run, on the executor's
reference interpreter, is timed node by node (`measure`), and the cut balances the measured time
wherever the run timed a node (nodes it could not time, e.g. inside an inlined function, keep
their estimate, scaled to the measured total). Both are reported, so a poor estimate shows.

The cut. Nodes stay in the model's order (a topological order) and each part is a run of
consecutive nodes; a top-level ONNX graph is acyclic, so its strongly connected parts are single
nodes: control flow (If, Loop, Scan with their bodies) and recurrent cells (LSTM, GRU, RNN) are
nodes and are never split. A boundary costs the bytes of the values crossing it (produced before,
read after; the model's inputs read after it too, handed on from the first stage), copied once
into a sealed memfd and mapped by the next stage, at COPY_BYTES_PER_NS; a boundary a non-tensor
value (a sequence, an optional) would cross is never chosen, nor one inside a run of nodes the
first run left unshaped. The chosen cut first minimises the slowest stage (the pipeline's
throughput), then, among cuts within BALANCE_SLACK of that, carries the fewest bytes — two
dynamic programmes over the boundaries. Constants (Constant nodes) are copied into each part that
reads them instead of crossing.

A part (`part`) is a model of its own: its nodes, the initializers and constants they read, as
inputs the values it reads from earlier parts or the model's inputs (their types from the cut:
`Cut.values`), as outputs what later parts or the model's outputs read.
"""
import collections
import dataclasses
import math

import numpy as np
import onnx

from rtd import dtypes
from rtd.errors import Code, RtdError

from .graph import GraphRunner, TracedShape
from .ir import from_onnx
from .model import compile_model
from .profile import Profile

MAX_STAGES = 8
FLOPS_PER_NS = 8.0        # one core's sustained multiply-adds of the compiled kernels, about
BYTES_PER_NS = 4.0        # memory traffic of one core, about
COPY_BYTES_PER_NS = 2.0   # a value crossing a boundary: written into a memfd, faulted in by the next stage
BALANCE_SLACK = 0.05      # cuts within this of the best bottleneck compete on bytes
UNKNOWN_BYTES = 1024      # a value the run left unshaped
MEASURE_DIM = 64          # the size of a free dim (not the batch) in the measured run
RECURRENT = frozenset({"LSTM", "GRU", "RNN"})


def _bad(detail: str) -> RtdError:
    return RtdError(Code.E_CONFIG_INVALID, f"rtd_stages: {detail}")


def free_names(graph: onnx.GraphProto) -> set:
    """Names a (sub)graph reads from the scopes around it."""
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    free = set()
    for node in graph.node:
        for name in node_reads(node):
            if name and name not in defined:
                free.add(name)
        defined.update(node.output)
    return free


def node_reads(node: onnx.NodeProto) -> list:
    """A node's inputs and the outer names its bodies read (If, Loop, Scan)."""
    inner = set()
    for attr in node.attribute:
        for body in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
            inner |= free_names(body)
    return [*node.input, *sorted(inner - set(node.input))]


@dataclasses.dataclass(frozen=True)
class Cut:
    """K consecutive node ranges of the top-level graph, and the wire dtype and rank of each value
    crossing a boundary (what a later part declares as its input)."""
    ranges: tuple
    values: dict

    def to_json(self) -> dict:
        return {"ranges": [list(r) for r in self.ranges], "values": {k: list(v) for k, v in self.values.items()}}

    @classmethod
    def from_json(cls, doc, nodes: int, count: int) -> "Cut":
        """A cut as another stage's worker stated it, checked against this graph."""
        try:
            ranges = tuple((int(a), int(b)) for a, b in doc["ranges"])
            values = {str(k): (str(v[0]), int(v[1])) for k, v in doc["values"].items()}
        except (TypeError, KeyError, ValueError, IndexError):
            raise _bad("the cut is not {ranges, values}") from None
        if (len(ranges) != count or ranges[0][0] != 0 or ranges[-1][1] != nodes
                or any(a >= b for a, b in ranges) or any(ranges[i][1] != ranges[i + 1][0] for i in range(count - 1))):
            raise _bad(f"the cut {list(ranges)[:8]} does not split {nodes} nodes into {count} runs")
        if any(d not in dtypes.BY_WIRE or not 0 <= r <= 64 for d, r in values.values()):
            raise _bad("the cut's values are not (dtype, rank)")
        return cls(ranges, values)


@dataclasses.dataclass
class Measured:
    """Runs of the whole model: each value's (shape, dtype), each node's share of the time (ns)."""
    shapes: dict
    node_ns: list
    model: object = None   # the whole model, compiled (its inputs and outputs state its signature)


def zeros_for(proto: onnx.ModelProto, free: int = 1) -> dict:
    """Feeds for one run: zeros of the declared types, a symbolic first dim (the batch) as 1,
    other symbolic dims as `free`; E_CONFIG_INVALID when an input's type or rank is not declared."""
    initializers = {t.name for t in proto.graph.initializer}
    feeds = {}
    for value in proto.graph.input:
        if value.name in initializers:
            continue
        t = value.type.tensor_type
        if not value.type.HasField("tensor_type") or not t.elem_type or not t.HasField("shape"):
            raise _bad(f"input {value.name!r} has no declared tensor type and rank: the graph cannot be measured")
        dims = [d if isinstance(d, int) else 1 if axis == 0 else free for axis, d in enumerate(dtypes.declared_dims(t.shape))]
        feeds[value.name] = np.zeros(dims, onnx.helper.tensor_dtype_to_np_dtype(t.elem_type))
    return feeds


def measure_model(proto: onnx.ModelProto, weights: dict | None) -> Measured:
    """`measure` at a size where costs resemble a real request's: free dims (a sequence, an image
    side) at MEASURE_DIM — a transformer's attention at one token costs nothing — or, where the
    graph will not run at that size, at 1."""
    try:
        return measure(proto, weights, zeros_for(proto, MEASURE_DIM))
    except RtdError as e:
        if e.code is Code.E_CONFIG_INVALID:
            raise
        return measure(proto, weights, zeros_for(proto))


def measure(proto: onnx.ModelProto, weights: dict | None, feeds: dict, runs: int = 4) -> Measured:
    """Run the model on `feeds`: the shapes of every value (the interpreter's trace), and, compiled
    as it is served, each node's time, the fastest of `runs` profiled runs (a plan
    step's time goes to the node whose output it writes; a step that writes no node's output, a
    fused or renamed one, to the next that does)."""
    env = GraphRunner(from_onnx(proto, weights)).trace(feeds)   # every value the model names, before fusion renames any
    shapes = {}
    for name, value in env.items():
        if isinstance(value, (np.ndarray, np.generic, TracedShape)):
            shapes[name] = (tuple(np.shape(value)), np.dtype(value.dtype))
    for t in proto.graph.initializer:
        shapes.setdefault(t.name, (tuple(t.dims), np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type))))
    model = compile_model(proto, weights=weights)
    steps = model.step_names(feeds)
    best = None
    for _ in range(runs):
        record = Profile()
        model.run(feeds, record=record)
        times = [end - start for _, start, end in record.steps]
        best = times if best is None else [min(a, b) for a, b in zip(best, times)]
    return Measured(shapes, attribute(proto, steps, best or []), model)


def attribute(proto: onnx.ModelProto, steps: list, times: list) -> list:
    """Each node's share of the plan steps' times: a step covers the nodes after the last one
    whose output it reads, up to the last whose output it writes (a fused step, the nodes it
    replaced; a step writing only new names, the node after what it reads), evenly."""
    n = len(proto.graph.node)
    position = {name: i for i, node in enumerate(proto.graph.node) for name in node.output if name}
    node_ns = [0.0] * n
    for (reads, writes), ns in zip(steps, times):
        low = max((position[name] for name in reads if name in position), default=-1)
        written = [position[name] for name in writes if name in position]
        high = max(written) if written else min(low + 1, n - 1)
        for name in writes:
            position.setdefault(name, high)   # a value the compiler made stands where its step does
        first = min(low + 1, high)
        share = ns / (high - first + 1)
        for i in range(first, high + 1):
            node_ns[i] += share
    return node_ns


def _nbytes(name: str, shapes: dict) -> int:
    known = shapes.get(name)
    if known is None:
        return UNKNOWN_BYTES
    shape, dtype = known
    return int(np.prod(shape, dtype=np.int64)) * (dtype.itemsize if dtype != object else 8)


def _elements(name: str, shapes: dict) -> int:
    known = shapes.get(name)
    return int(np.prod(known[0], dtype=np.int64)) if known is not None else 0


def flops(node: onnx.NodeProto, shapes: dict) -> int:
    """Multiply-adds ×2 for the matrix, convolution and recurrent ops; one per output element else."""
    out = sum(_elements(o, shapes) for o in node.output if o)
    shape = lambda i: shapes.get(node.input[i], ((),))[0] if len(node.input) > i and node.input[i] else ()  # noqa: E731
    op = node.op_type
    if op in ("MatMul", "MatMulInteger", "QLinearMatMul", "FusedMatMul") and shape(0):
        return 2 * out * int(shape(0)[-1])
    if op == "Gemm" and len(shape(0)) == 2:
        trans = any(a.name == "transA" and a.i for a in node.attribute)
        return 2 * out * int(shape(0)[0 if trans else 1])
    if op in ("Conv", "ConvInteger", "QLinearConv"):
        w = shape(3 if op == "QLinearConv" else 1)
        return 2 * out * int(np.prod(w[1:], dtype=np.int64)) if w else out
    if op == "ConvTranspose" and shape(1):
        return 2 * _elements(node.input[0], shapes) * int(np.prod(shape(1)[1:], dtype=np.int64))
    if op in RECURRENT and shape(0) and shape(1) and shape(2):
        steps = int(np.prod(shape(0)[:2], dtype=np.int64))
        return 2 * steps * (int(np.prod(shape(1)[1:], dtype=np.int64)) + int(np.prod(shape(2)[1:], dtype=np.int64)))
    return out


def estimate_ns(node: onnx.NodeProto, shapes: dict) -> float:
    moved = sum(_nbytes(n, shapes) for n in (*node.input, *node.output) if n)
    return flops(node, shapes) / FLOPS_PER_NS + moved / BYTES_PER_NS


@dataclasses.dataclass
class Boundaries:
    """Per boundary p (before node p, 0..n): the bytes crossing it, and whether it may be cut."""
    bytes: np.ndarray
    allowed: np.ndarray


def boundaries(proto: onnx.ModelProto, shapes: dict) -> tuple[Boundaries, dict]:
    """The boundaries and, per value that can cross one, its (wire dtype, rank)."""
    graph, n = proto.graph, len(proto.graph.node)
    constants = {t.name for t in graph.initializer} | {o for node in graph.node if node.op_type == "Constant" for o in node.output}
    produced = {v.name: -1 for v in graph.input if v.name not in constants}
    last: dict = {}
    for i, node in enumerate(graph.node):
        for name in node_reads(node):
            if name in produced:
                last[name] = i
        for name in node.output:
            if name and name not in constants:
                produced[name] = i
    for v in graph.output:
        if v.name in produced:
            last[v.name] = n
    crossing, allowed, typed = np.zeros(n + 1), np.ones(n + 1, bool), {}
    allowed[0] = allowed[n] = True
    for name, at in produced.items():
        end = last.get(name)
        if end is None or end <= at:
            continue
        known = shapes.get(name)
        row = dtypes.of_numpy(known[1]) if known is not None else None
        span = slice(max(at + 1, 1), min(end, n - 1) + 1)
        if row is None:
            allowed[span] = False   # not a tensor rtd can hand on (or never shaped): no cut here
            continue
        typed[name] = (row.wire, len(known[0]))
        crossing[span] += _nbytes(name, shapes)
    return Boundaries(crossing, allowed), typed


def _stage_costs(prefix: np.ndarray, crossing: np.ndarray, i, j):
    copy = (crossing[i] * (i > 0) + crossing[j] * (j < len(prefix) - 1)) / COPY_BYTES_PER_NS
    return prefix[j] - prefix[i] + copy


def choose(costs: list, bounds: Boundaries, count: int) -> list:
    """The K-1 boundaries: the slowest stage as fast as possible, then the fewest bytes among cuts
    within BALANCE_SLACK of it (each stage at least one node)."""
    n = len(costs)
    if not 2 <= count <= min(MAX_STAGES, n):
        raise _bad(f"{count} stages of a graph of {n} nodes (2..{min(MAX_STAGES, n)})")
    prefix = np.concatenate([[0.0], np.cumsum(costs)])
    crossing, allowed = bounds.bytes, bounds.allowed
    positions = np.arange(n + 1)
    inf = math.inf
    best = np.full((count + 1, n + 1), inf)
    best[1, 1:] = _stage_costs(prefix, crossing, 0, positions[1:])
    for k in range(2, count + 1):
        for j in range(k, n + 1):
            i = positions[k - 1:j]
            ok = allowed[i]
            if not ok.any():
                continue
            cand = np.maximum(best[k - 1, i], _stage_costs(prefix, crossing, i, j))
            best[k, j] = np.min(np.where(ok, cand, inf))
    bottleneck = best[count, n]
    if not math.isfinite(bottleneck):
        raise _bad(f"no cut into {count} parts avoids a value that cannot be handed on")
    bound = bottleneck * (1 + BALANCE_SLACK) + 1e-9
    total = np.full((count + 1, n + 1), inf)
    back = np.zeros((count + 1, n + 1), int)
    total[1, 1:] = np.where(_stage_costs(prefix, crossing, 0, positions[1:]) <= bound, 0.0, inf)
    for k in range(2, count + 1):
        for j in range(k, n + 1):
            i = positions[k - 1:j]
            cand = np.where(allowed[i] & (_stage_costs(prefix, crossing, i, j) <= bound), total[k - 1, i] + crossing[i], inf)
            at = int(np.argmin(cand))
            total[k, j], back[k, j] = cand[at], i[at]
    cuts, j = [], n
    for k in range(count, 1, -1):
        j = back[k, j]
        cuts.append(int(j))
    return sorted(cuts)


def by_node_count(n: int, count: int) -> list:
    """The naive cut: equal numbers of nodes (for comparison)."""
    return [round(n * k / count) for k in range(1, count)]


def plan(proto: onnx.ModelProto, count: int, measured: Measured, naive: bool = False) -> tuple[Cut, dict]:
    """The cut into `count` parts and its report: per stage its node range, its most frequent ops,
    its estimated and measured time and the bytes it hands on."""
    nodes = proto.graph.node
    estimated = [estimate_ns(node, measured.shapes) for node in nodes]
    timed = sum(measured.node_ns) > 0
    costs = measured.node_ns if timed else estimated
    bounds, typed = boundaries(proto, measured.shapes)
    cuts = by_node_count(len(nodes), count) if naive else choose(costs, bounds, count)
    edges = [0, *cuts, len(nodes)]
    ranges = tuple(zip(edges[:-1], edges[1:]))
    crossing = {name for a, _ in ranges[1:] for name in _reads_before(proto, a)}
    cut = Cut(ranges, {name: typed[name] for name in sorted(crossing) if name in typed})
    stages, prefix = [], np.concatenate([[0.0], np.cumsum(costs)])
    for a, b in ranges:
        ops = collections.Counter(node.op_type for node in nodes[a:b])
        stages.append({"nodes": [a, b], "ops": dict(ops.most_common(6)), "node_count": b - a,
                       "estimated_ms": round(sum(estimated[a:b]) / 1e6, 3),
                       "measured_ms": round(sum(measured.node_ns[a:b]) / 1e6, 3) if timed else None,
                       "cost_ms": round(float(_stage_costs(prefix, bounds.bytes, a, b)) / 1e6, 3),   # with its copies
                       "hands_on_bytes": int(bounds.bytes[b]) if b < len(nodes) else 0})
    report = {"stages": stages, "method": "node count" if naive else ("measured" if timed else "estimated"),
              "bottleneck_ms": max(s["cost_ms"] for s in stages),
              "crossing_bytes": int(sum(bounds.bytes[a] for a, _ in ranges[1:]))}
    return cut, report


def _reads_before(proto: onnx.ModelProto, at: int) -> set:
    """Values read at or after node `at` that the model's inputs or nodes before `at` provide."""
    graph = proto.graph
    initializers = {t.name for t in graph.initializer}
    before = {v.name for v in graph.input if v.name not in initializers}
    for node in graph.node[:at]:
        if node.op_type != "Constant":
            before.update(o for o in node.output if o)
    read = {v.name for v in graph.output}
    for node in graph.node[at:]:
        read.update(node_reads(node))
    return before & read


def part(proto: onnx.ModelProto, cut: Cut, index: int) -> onnx.ModelProto:
    """Part `index` of the model as a model of its own (initializers shared by reference to the
    same TensorProto data: the caller's weights map them)."""
    graph, (a, b) = proto.graph, cut.ranges[index]
    nodes = list(graph.node[a:b])
    here = set().union(*(node_reads(node) for node in nodes)) if nodes else set()
    constant_nodes = [node for node in graph.node[:a] if node.op_type == "Constant" and set(node.output) & here]
    produced = {o for node in (*constant_nodes, *nodes) for o in node.output if o}
    initializers = [t for t in graph.initializer if t.name in here]
    declared = {v.name: v for v in graph.input}
    inputs = []
    for name in sorted(here - produced - {t.name for t in initializers} - {""}):
        if name in declared:
            inputs.append(declared[name])
            continue
        if name not in cut.values:
            raise _bad(f"stage {index + 1} reads {name!r}, which the cut does not type")
        dtype, rank = cut.values[name]
        elem = onnx.helper.np_dtype_to_tensor_dtype(dtypes.BY_WIRE[dtype].numpy) if dtype != "bytes" else onnx.TensorProto.STRING
        inputs.append(onnx.helper.make_tensor_value_info(name, elem, [None] * rank))
    later = {v.name for v in graph.output} | set().union(*(node_reads(node) for node in graph.node[b:]))
    model_outputs = {v.name: v for v in graph.output}
    outputs = []
    for node in nodes:
        for name in node.output if node.op_type != "Constant" else ():   # constants are copied, not handed on
            if name and name in later:
                if name in model_outputs:
                    outputs.append(model_outputs[name])
                else:
                    dtype, rank = cut.values[name]
                    elem = (onnx.helper.np_dtype_to_tensor_dtype(dtypes.BY_WIRE[dtype].numpy) if dtype != "bytes"
                            else onnx.TensorProto.STRING)
                    outputs.append(onnx.helper.make_tensor_value_info(name, elem, [None] * rank))
    sub = onnx.helper.make_graph([*constant_nodes, *nodes], f"{graph.name}_stage{index + 1}", inputs, outputs, initializers)
    model = onnx.ModelProto()
    model.ir_version = proto.ir_version
    model.opset_import.extend(proto.opset_import)
    model.functions.extend(proto.functions)
    model.graph.CopyFrom(sub)
    return model
