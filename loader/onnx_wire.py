"""A structural pre-scan of ONNX protobuf bytes, before any parser builds objects from them.

Walks the wire format iteratively (an explicit stack, never recursion) along the only paths
where graphs nest -- model.graph, model.functions, model.training_info, graph.node,
function.node, node.attribute, attribute.g / attribute.graphs -- counting nodes and the depth
of If/Loop/Scan bodies. A model nested 200 deep is thus refused as E_ONNX_LIMIT with its depth
named, instead of surfacing as a protobuf recursion error (or a RecursionError) later.
Malformed wire data is E_ONNX_PARSE.
"""
from rtd.errors import Code, RtdError
from rtd.protowire import LENGTH, Walker

# message kind -> {field number: child message kind} for the length-delimited fields we descend into
_DESCEND = {
    "model": {7: "graph", 20: "training", 25: "function"},
    "training": {1: "graph", 2: "graph"},
    "graph": {1: "node"},
    "function": {7: "node"},
    "node": {5: "attribute"},
    "attribute": {6: "subgraph", 11: "subgraph"},
}
def scan(data: memoryview, *, max_depth: int, max_nodes: int) -> tuple[int, int]:
    """(node count, deepest subgraph nesting) of serialized ModelProto bytes, within the caps."""
    walker = Walker(data, Code.E_ONNX_PARSE)
    stack = [("model", 0, len(walker.buf), 0)]
    nodes = deepest = 0
    while stack:
        kind, pos, end, depth = stack.pop()
        children = _DESCEND.get(kind if kind != "subgraph" else "graph", {})
        for field, wire, value in walker.fields(pos, end):
            child = children.get(field) if wire == LENGTH else None
            if child == "subgraph":
                if depth + 1 > max_depth:
                    raise RtdError(Code.E_ONNX_LIMIT, f"subgraphs nest deeper than {max_depth}")
                deepest = max(deepest, depth + 1)
                stack.append(("subgraph", *value, depth + 1))
            elif child is not None:
                if child == "node":
                    nodes += 1
                    if nodes > max_nodes:
                        raise RtdError(Code.E_ONNX_LIMIT, f"more than {max_nodes} nodes")
                stack.append((child, *value, depth))
    return nodes, deepest
