"""Passes that only remove: Identity/Dropout elimination and dead-node elimination."""
from ..ir import Graph
from .rewrite import Index


def eliminate_identity(graph: Graph) -> Graph:
    """Identity and inference-mode Dropout forward their input; consumers read it directly."""
    index = Index(graph)
    rename = {}
    keep = []
    for node in graph.nodes:
        node.inputs = [rename.get(n, n) for n in node.inputs]
        passthrough = node.domain == "" and (
            node.op_type == "Identity"
            or (node.op_type == "Dropout" and not _training(index, node) and (len(node.outputs) < 2 or not node.outputs[1] or not index.uses(node.outputs[1])))
        )
        if passthrough and node.inputs and node.inputs[0] and node.outputs[0] not in index.pinned:
            rename[node.outputs[0]] = node.inputs[0]
        else:
            keep.append(node)
    graph.nodes = keep
    return graph


def _training(index: Index, node) -> bool:
    if len(node.inputs) > 2 and node.inputs[2]:
        flag = index.constant(node.inputs[2])
        return flag is None or bool(flag)
    return False


def eliminate_dead(graph: Graph) -> Graph:
    """Drop nodes none of whose outputs is used, and constants nothing reads."""
    live = set(graph.outputs) - {""}   # "" (an absent value) is never live: a node's unused optional output is ""
    keep = []
    for node in reversed(graph.nodes):   # set operations, not generators: this runs after every pass
        if not live.isdisjoint(node.outputs):
            keep.append(node)
            live.update(node.inputs, node.implicit)
            live.discard("")
    graph.nodes = keep[::-1]
    graph.constants = {k: v for k, v in graph.constants.items() if k in live}
    return graph
