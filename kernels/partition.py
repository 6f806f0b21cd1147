"""Graph partitioning across devices: a model whose ops the GPU backend lacks still runs on the
GPU, those ops on the CPU inside the same worker, the graph cut where the fewest bytes cross.

Which ops stay on the host is the kernels' own word (`Kernel.on_device`: the ai.onnx.ml ops,
which hold strings and run NumPy loops; random draws; NonMaxSuppression's loop). A node with
subgraphs (If, Loop, Scan) is one unit, on the host if anything in its bodies is, so control
flow is never split; recurrent cells (LSTM, GRU, RNN) are single nodes already. Fused nodes
(domain rtd) stay on the device: their planned buffers live there.

The cut is a minimum s-t cut (scipy's maximum_flow): the device is the source, the host the
sink; a host-only node is tied to the sink, a fused node to the source; every other node
pays, to run on the host, about its work in bytes (its outputs' bytes, HEAVY_WEIGHT times that
for the matrix and convolution ops, nothing for the shape-only ops, which then follow their
neighbours); every value costs its bytes once if its producer and consumers end up apart (a
hyperedge: one copy serves all of one side's consumers). Graph inputs arrive on the host and
outputs leave from it. So the cut lands on the narrowest tensors near the host-only ops, and
cheap ops around them move to whichever side saves a copy.

`apply` rewrites the graph with the copies as nodes of domain rtd.transfer: CopyToDevice after
a host value's producer (for graph inputs, first), CopyToHost after a device value's producer
and AwaitHost just before its first host consumer, so the device-to-host copy runs on its own
stream while the device computes what does not need it. Constants a host node reads get a host
copy of their own (`name@cpu`). The transfer kernels come from `transfers(xp)`: identities on
NumPy (a partitioned plan then runs on the CPU exactly as it would on the GPU, which is how
the tests check a rewrite), the copy stream on CuPy (backend_cupy.Transfers).
"""
import copy
import dataclasses
import math

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import breadth_first_order, maximum_flow

from .ir import RTD_DOMAIN, Graph, Node
from .ops import lookup

HOST, DEVICE = "cpu", "cuda"
TRANSFER_DOMAIN = "rtd.transfer"
HEAVY = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum", "LSTM", "GRU", "RNN", "Attention",
                   "MatMulInteger", "QLinearMatMul", "QLinearConv", "ConvInteger"})
SHAPE_ONLY = frozenset({"Shape", "Size", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Constant",
                        "ConstantOfShape"})
HEAVY_WEIGHT = 16
UNKNOWN_BYTES = 1024    # a value the trace gave no shape (a sequence, an optional): a small one
INFINITE = 1 << 30
FINITE_TOTAL = 1 << 28  # finite capacities are scaled to sum below this, far from INFINITE and int32's end


def host_only(node: Node, opsets: dict) -> bool:
    """Whether the node must run on the host: its kernel says so, or a node in its bodies does."""
    if node.domain == RTD_DOMAIN:
        return False
    if any(host_only(inner, {**opsets, **body.opsets}) for body in node.subgraphs() for inner in body.nodes):
        return True
    return not lookup(node.domain, node.op_type, opsets[node.domain]).on_device


@dataclasses.dataclass(frozen=True)
class Crossing:
    name: str
    nbytes: int
    to: str      # HOST or DEVICE


@dataclasses.dataclass(frozen=True)
class Partition:
    host: frozenset[int]              # indices into graph.nodes of the nodes placed on the host
    crossings: tuple[Crossing, ...]   # the values copied between the devices, once each per run

    @property
    def bytes_crossing(self) -> int:
        return sum(c.nbytes for c in self.crossings)

    def device_of(self, index: int) -> str:
        return HOST if index in self.host else DEVICE


def _nbytes(name: str, shapes: dict) -> int:
    known = shapes.get(name)
    if known is None:
        return UNKNOWN_BYTES
    shape, dtype = known
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def _host_cost(node: Node, shapes: dict) -> int:
    if node.op_type in SHAPE_ONLY:
        return 0
    out = sum(_nbytes(o, shapes) for o in node.outputs if o)
    return out * HEAVY_WEIGHT if node.op_type in HEAVY else out


def partition(graph: Graph, shapes: dict) -> Partition:
    """Where each node runs for this shape signature (`shapes`: name -> (shape, dtype), as
    lower_signature gives them), and what crosses. Without a host-only node: all on the device."""
    pinned = [host_only(node, graph.opsets) for node in graph.nodes]
    if not any(pinned):
        return Partition(frozenset(), ())
    source, sink, first = 0, 1, 2
    producer = {name: sink for name in graph.inputs}   # graph inputs arrive on the host
    for i, node in enumerate(graph.nodes):
        for out in node.outputs:
            if out:
                producer[out] = first + i
    members: dict[str, set] = {}
    for i, node in enumerate(graph.nodes):
        for name in node.inputs + node.implicit:
            if name in producer:
                members.setdefault(name, {producer[name]}).add(first + i)
    for name in graph.outputs:
        if name in producer:
            members.setdefault(name, {producer[name]}).add(sink)   # outputs leave from the host
    values = [(name, group) for name, group in members.items() if len(group) > 1]
    n = first + len(graph.nodes) + 2 * len(values)
    edges: list[tuple[int, int, float]] = []
    for i, (node, on_host) in enumerate(zip(graph.nodes, pinned)):
        if on_host:
            edges.append((first + i, sink, math.inf))
        elif node.domain == RTD_DOMAIN:
            edges.append((source, first + i, math.inf))
        else:
            edges.append((source, first + i, _host_cost(node, shapes)))
    for k, (name, group) in enumerate(values):   # a hyperedge: its bytes once if the group is split
        into, out_of = first + len(graph.nodes) + 2 * k, first + len(graph.nodes) + 2 * k + 1
        edges += [(m, into, math.inf) for m in group] + [(out_of, m, math.inf) for m in group]
        edges.append((into, out_of, _nbytes(name, shapes)))
    device_side = _source_side(n, edges, source, sink)
    host = frozenset(i for i in range(len(graph.nodes)) if first + i not in device_side)
    crossings = []
    for name, group in values:
        sides = {m != sink and m in device_side for m in group}
        if len(sides) == 2:
            to = HOST if producer[name] in device_side else DEVICE
            crossings.append(Crossing(name, _nbytes(name, shapes), to))
    return Partition(host, tuple(crossings))


def _source_side(n: int, edges: list, source: int, sink: int) -> set[int]:
    """The nodes on the source's side of a minimum cut: reachable from it in the residual graph."""
    finite = sum(c for _, _, c in edges if math.isfinite(c))
    scale = max(1.0, finite / FINITE_TOTAL)
    rows, cols, caps = [], [], []
    for u, v, c in edges:
        rows.append(u)
        cols.append(v)
        caps.append(INFINITE if not math.isfinite(c) else int(math.ceil(c / scale)) if c > 0 else 0)
    capacity = csr_matrix((np.array(caps, np.int32), (rows, cols)), shape=(n, n))   # duplicates summed
    capacity.data = np.minimum(capacity.data, INFINITE).astype(np.int32)
    flow = maximum_flow(capacity, source, sink).flow
    residual = (capacity - flow).tocsr()
    residual.data[residual.data < 0] = 0
    residual.eliminate_zeros()
    return set(breadth_first_order(residual, source, directed=True, return_predecessors=False).tolist())


def _rename_free(graph: Graph, old: str, new: str) -> Graph:
    """A copy of a body reading the enclosing scope's `old` as `new` (ONNX names are unique, so
    every use of a free name is the enclosing one)."""
    body = copy.copy(graph)
    body.nodes = [_renamed(node, old, new) for node in graph.nodes]
    return body


def _renamed(node: Node, old: str, new: str) -> Node:
    attrs = {k: _rename_free(v, old, new) if isinstance(v, Graph) else
             [_rename_free(g, old, new) for g in v] if isinstance(v, list) and v and isinstance(v[0], Graph) else v
             for k, v in node.attrs.items()}
    return dataclasses.replace(node, inputs=[new if n == old else n for n in node.inputs],
                               implicit=[new if n == old else n for n in node.implicit], attrs=attrs)


def apply(graph: Graph, part: Partition, shapes: dict) -> tuple[Graph, dict, list[str]]:
    """The graph with the copies as transfer nodes, the shapes with the copies' names, and per
    node of the new graph where it runs (transfer nodes: DEVICE, they drive the copies)."""
    if not part.host:
        return graph, shapes, [DEVICE] * len(graph.nodes)
    crossing = {c.name: c for c in part.crossings}
    renamed = {c.name: f"{c.name}@{c.to}" for c in part.crossings}
    host_constants = {}
    nodes, where = [], []
    waiting = {}   # a value copied to the host -> its AwaitHost node, placed before its first host consumer

    def emit(node: Node, device: str):
        nodes.append(node)
        where.append(device)

    for name in graph.inputs:
        if name in crossing:
            emit(Node("CopyToDevice", TRANSFER_DOMAIN, [name], [renamed[name]], {}), DEVICE)
    for i, node in enumerate(graph.nodes):
        device = part.device_of(i)
        for name in node.inputs + node.implicit:
            c = crossing.get(name)
            if c is not None and c.to == device:
                node = _renamed(node, name, renamed[name])
                if name in waiting:
                    emit(waiting.pop(name), DEVICE)
            elif device == HOST and name in graph.constants:
                host_constants[name] = f"{name}@{HOST}"
                node = _renamed(node, name, host_constants[name])
        emit(node, device)
        for out in node.outputs:
            c = crossing.get(out)
            if c is None:
                continue
            if c.to == DEVICE:
                emit(Node("CopyToDevice", TRANSFER_DOMAIN, [out], [renamed[out]], {}), DEVICE)
            else:
                staged = f"{out}@staged"
                emit(Node("CopyToHost", TRANSFER_DOMAIN, [out], [staged], {}), DEVICE)
                waiting[out] = Node("AwaitHost", TRANSFER_DOMAIN, [staged], [renamed[out]], {})
    rewritten = copy.copy(graph)
    rewritten.nodes = nodes
    rewritten.constants = {**graph.constants, **{new: graph.constants[old] for old, new in host_constants.items()}}
    shapes = dict(shapes)
    for c in part.crossings:
        if c.name in shapes:
            shapes[renamed[c.name]] = shapes[f"{c.name}@staged"] = shapes[c.name]
    for old, new in host_constants.items():
        if old in shapes:
            shapes[new] = shapes[old]
    return rewritten, shapes, where


class Transfer:
    """A transfer node's kernel: `run(x) -> (copy,)` through the device's `transfers`."""
    needs_scope = False

    def __init__(self, op_type: str, transfers):
        self.run_copy = {"CopyToDevice": transfers.to_device, "CopyToHost": transfers.to_host,
                         "AwaitHost": transfers.await_host}[op_type]

    def run(self, x):
        return (self.run_copy(x),)


class HostTransfers:
    """The copies when both sides are the host (NumPy plans): nothing to move."""

    @staticmethod
    def to_device(x):
        return x

    to_host = await_host = to_device
