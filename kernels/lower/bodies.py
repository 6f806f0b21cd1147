"""Control-flow bodies made plain graph where the values allow.

`constants_into_bodies` (compile time): a constant of the enclosing graph that a body reads becomes a
constant of the body (the same array), so the body's own lowering folds what is computed from it (a
recurrent layer's weights sliced and concatenated on every call inside an If branch) and its kernels see
constant weights (packed once) instead of scope values.

`inline_static_ifs` (compile time and per shape signature): an If whose condition is a constant (folded
from shapes for this signature, as exporters' rank and size checks are) is replaced by the nodes of the
branch it takes, so the plan runs them as its own steps: no branch call, no plan of its own, fusions
across the edge.
"""
import copy

import numpy as np

from ..ir import Graph, Node


def _with_constants(body: Graph, outer: dict) -> Graph:
    """A copy of `body` holding the outer constants it reads (and so on into its own bodies)."""
    free = body.free_names()
    taken = {name: outer[name] for name in free if name in outer}
    body = copy.copy(body)
    body.constants = {**body.constants, **taken}
    visible = {**outer, **body.constants}
    body.nodes = [_node_with_constants(node, visible) for node in body.nodes]
    return body


def _node_with_constants(node: Node, visible: dict) -> Node:
    if not any(node.subgraphs()):
        return node
    node = copy.copy(node)
    attrs = {}
    for key, value in node.attrs.items():
        if isinstance(value, Graph):
            value = _with_constants(value, visible)
        elif isinstance(value, list) and value and isinstance(value[0], Graph):
            value = [_with_constants(g, visible) for g in value]
        attrs[key] = value
    node.attrs = attrs
    node.implicit = sorted(set().union(*(g.free_names() for g in node.subgraphs())))
    return node


def constants_into_bodies(graph: Graph) -> Graph:
    graph.nodes = [_node_with_constants(node, graph.constants) for node in graph.nodes]
    return graph


def _defined(graph: Graph) -> set:
    """Every name a graph or its bodies define."""
    names = set(graph.inputs) | set(graph.constants)
    for node in graph.nodes:
        names.update(n for n in node.outputs if n)
        for body in node.subgraphs():
            names |= _defined(body)
    return names


def inline_static_ifs(graph: Graph) -> Graph:
    """Each If with a constant condition replaced by its taken branch's nodes, its outputs by Identity
    nodes from the branch's results (identity elimination then removes them). A branch defining a
    name the graph also defines (exporters keep names unique, the format does not insist) stays an If."""
    nodes = []
    for node in graph.nodes:
        cond = graph.constants.get(node.inputs[0]) if node.op_type == "If" and node.domain == "" and node.inputs else None
        if cond is None or np.asarray(cond).size != 1:
            nodes.append(node)
            continue
        branch = node.attrs["then_branch" if bool(np.asarray(cond).reshape(-1)[0]) else "else_branch"]
        inner = _defined(branch)
        outer = _defined(Graph([n for n in graph.nodes if n is not node], graph.inputs, [], graph.constants, graph.opsets))
        if inner & outer or len(branch.outputs) != len(node.outputs):
            nodes.append(node)
            continue
        graph.constants.update(branch.constants)
        nodes += [n.editable() for n in branch.nodes]
        nodes += [Node("Identity", "", [result], [name], {}, name=f"{node.name}/out{i}")
                  for i, (result, name) in enumerate(zip(branch.outputs, node.outputs)) if name]
    graph.nodes = nodes
    return graph

