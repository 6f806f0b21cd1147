"""Element-wise chain fusion for one shape signature: runs of Elementwise nodes → ElementwiseChain.

A chain is a path n1 → n2 → … where each link's result is read only by the next link and
every link's result has the chain's final shape and dtype, so the links can write, in turn,
into the chain's output buffer and one scratch buffer. Single element-wise nodes become
one-link chains too, so the memory planner hands them their output buffer.

A chain that only a float convolution's output feeds (besides constants of one value or one per
output channel) then goes into that convolution (`fuse_conv_chains`): the compiled convolution runs
it on each output tile while the tile is in cache (a SiLU or HardSwish after every Conv of a YOLO or
PP-OCR net costs no pass over memory of its own).
"""
import numpy as np

from ..ir import RTD_DOMAIN, Graph, Node
from ..native.chain import Program
from ..ops import Elementwise, lookup
from .rewrite import Index


def _elementwise(node: Node, opsets: dict) -> bool:
    if node.domain == RTD_DOMAIN or any(node.subgraphs()) or len([o for o in node.outputs if o]) != 1:
        return False
    return issubclass(lookup(node.domain, node.op_type, opsets[node.domain]), Elementwise)


def fuse_chains(graph: Graph, shapes: dict, static: set) -> Graph:
    """`shapes` maps names to (shape, dtype) seen for this signature; `static` names are fixed by it."""
    index = Index(graph)
    fusable = {id(n) for n in graph.nodes if _elementwise(n, graph.opsets) and n.outputs[0] in static and n.outputs[0] in shapes}
    taken = set()
    result = []
    for node in graph.nodes:
        if id(node) in taken:
            continue
        if id(node) not in fusable:
            result.append(node)
            continue
        chain = [node]
        final = shapes[node.outputs[0]]
        while True:
            name = chain[-1].outputs[0]
            uses = index.uses(name)
            if len(uses) != 1 or name in index.pinned or id(uses[0]) not in fusable or id(uses[0]) in taken:
                break
            nxt = uses[0]
            if shapes[nxt.outputs[0]] != final:
                break
            chain.append(nxt)
        taken.update(id(n) for n in chain)
        result.append(_chain_node(chain, final))
    graph.nodes = _reorder(result)
    return graph


def _chain_node(chain: list, final) -> Node:
    inputs, links = [], []
    previous = None
    for node in chain:
        spec = []
        for name in node.inputs:
            if not name:
                spec.append(None)
            elif name == previous:
                spec.append(-1)
            else:
                if name not in inputs:
                    inputs.append(name)
                spec.append(inputs.index(name))
        links.append((node, spec))
        previous = node.outputs[0]
    shape, dtype = final
    return Node("ElementwiseChain", RTD_DOMAIN, inputs, [chain[-1].outputs[0]],
                {"links": links, "shape": shape, "dtype": dtype, "buffers": ("out",) if len(links) == 1 else ("out", "scratch")})


def _reorder(nodes: list) -> list:
    """A chain sits where its first link was; move nodes after the producers of their inputs."""
    done, ordered, pending = set(), [], list(nodes)
    produced = {o for n in nodes for o in n.outputs}
    while pending:
        progress = []
        for node in pending:
            if all(n in done or n not in produced for n in node.inputs + node.implicit if n):
                ordered.append(node)
                done.update(node.outputs)
            else:
                progress.append(node)
        if len(progress) == len(pending):
            raise AssertionError("chain fusion made a cycle")
        pending = progress
    return ordered


def _per_channel(value, channels: int) -> bool:
    """A float32 constant that broadcasts against (N, channels, H, W) as one value, or one per channel."""
    if value is None or value.dtype != np.float32 or value.ndim > 4:
        return False
    padded = (1,) * (4 - value.ndim) + tuple(value.shape)
    return padded in ((1, 1, 1, 1), (1, channels, 1, 1))


def fuse_conv_chains(graph: Graph, shapes: dict) -> Graph:
    """ElementwiseChain fed by a float Conv (or a ConvActivation without an added tensor or chain) whose
    output nothing else reads, its other inputs constants `_per_channel` → one ConvActivation carrying the
    chain's links (the compiled convolution applies them, see fused.ConvActivation)."""
    index = Index(graph)
    for chain in list(graph.nodes):
        if chain.op_type != "ElementwiseChain" or chain.domain != RTD_DOMAIN:
            continue
        links, dtype = chain.attrs["links"], chain.attrs["dtype"]
        if np.dtype(dtype) != np.float32 or len(chain.inputs) > 8 or Program.build(links, len(chain.inputs), dtype) is None:
            continue
        for position, name in enumerate(chain.inputs):
            conv = index.producer.get(name)
            if conv is None or name in index.pinned or len(index.uses(name)) != 1 or shapes.get(name) != shapes.get(chain.outputs[0]):
                continue
            plain = conv.op_type == "Conv" and conv.domain == ""
            activated = conv.op_type == "ConvActivation" and conv.domain == RTD_DOMAIN and not conv.attrs.get("links") \
                and (len(conv.inputs) < 4 or not conv.inputs[3])
            shape = shapes[name][0]
            if not (plain or activated) or len(shape) != 4:
                continue
            extra = [n for i, n in enumerate(chain.inputs) if i != position]
            if not all(_per_channel(index.constant(n), shape[1]) for n in extra):
                continue
            attrs = dict(conv.attrs) if activated else {"conv": dict(conv.attrs), "relu": False}
            attrs.update(links=links, chain_position=position, shape=chain.attrs["shape"], dtype=dtype)
            fused = Node("ConvActivation", RTD_DOMAIN, (conv.inputs + ["", ""])[:3] + [""] + extra, list(chain.outputs), attrs)
            graph.nodes[graph.nodes.index(chain)] = fused
            graph.nodes.remove(conv)
            break
    return graph
