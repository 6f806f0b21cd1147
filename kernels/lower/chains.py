"""Element-wise chain fusion for one shape signature: runs of Elementwise nodes → ElementwiseChain.

A chain is a path n1 → n2 → … where each link's result is read only by the next link and
every link's result has the chain's final shape and dtype, so the links can write, in turn,
into the chain's output buffer and one scratch buffer. Single element-wise nodes become
one-link chains too, so the memory planner hands them their output buffer.
"""
from ..ir import RTD_DOMAIN, Graph, Node
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
