"""A structural pre-scan of ONNX protobuf bytes, before any parser builds objects from them.

Walks the wire format iteratively (an explicit stack, never recursion) along the only paths
where graphs nest -- model.graph, model.functions, model.training_info, graph.node,
function.node, node.attribute, attribute.g / attribute.graphs -- counting nodes and the depth
of If/Loop/Scan bodies. A model nested 200 deep is thus refused as E_ONNX_LIMIT with its depth
named, instead of surfacing as a protobuf recursion error (or a RecursionError) later.
Malformed wire data is E_ONNX_PARSE.
"""
from rtd.errors import Code, RtdError

# message kind -> {field number: child message kind} for the length-delimited fields we descend into
_DESCEND = {
    "model": {7: "graph", 20: "training", 25: "function"},
    "training": {1: "graph", 2: "graph"},
    "graph": {1: "node"},
    "function": {7: "node"},
    "node": {5: "attribute"},
    "attribute": {6: "subgraph", 11: "subgraph"},
}
_FIXED = {1: 8, 5: 4}


def varint(buf, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise RtdError(Code.E_ONNX_PARSE, f"truncated or overlong varint at byte {pos}")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def fields(buf, pos: int, end: int):
    """(field, wire type, value) of one message: a varint's value, or (start, length) of a
    length-delimited field; fixed-width fields are skipped past."""
    while pos < end:
        key, pos = varint(buf, pos, end)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise RtdError(Code.E_ONNX_PARSE, f"field number 0 at byte {pos}")
        if wire == 0:
            value, pos = varint(buf, pos, end)
        elif wire in _FIXED:
            value, pos = None, pos + _FIXED[wire]
        elif wire == 2:
            length, pos = varint(buf, pos, end)
            value, pos = (pos, length), pos + length
        else:
            raise RtdError(Code.E_ONNX_PARSE, f"wire type {wire} at byte {pos}")
        if pos > end:
            raise RtdError(Code.E_ONNX_PARSE, f"field {field} runs past its message")
        yield field, wire, value


def scan(data: memoryview, *, max_depth: int, max_nodes: int) -> tuple[int, int]:
    """(node count, deepest subgraph nesting) of serialized ModelProto bytes, within the caps."""
    stack = [("model", 0, len(data), 0)]
    nodes = deepest = 0
    while stack:
        kind, pos, end, depth = stack.pop()
        children = _DESCEND.get(kind if kind != "subgraph" else "graph", {})
        for field, wire, value in fields(data, pos, end):
            child = children.get(field) if wire == 2 else None
            if child == "subgraph":
                if depth + 1 > max_depth:
                    raise RtdError(Code.E_ONNX_LIMIT, f"subgraphs nest deeper than {max_depth}")
                deepest = max(deepest, depth + 1)
                stack.append(("subgraph", value[0], value[0] + value[1], depth + 1))
            elif child is not None:
                if child == "node":
                    nodes += 1
                    if nodes > max_nodes:
                        raise RtdError(Code.E_ONNX_LIMIT, f"more than {max_nodes} nodes")
                stack.append((child, value[0], value[0] + value[1], depth))
    return nodes, deepest


def raw_data_spans(data: memoryview) -> dict[str, tuple[int, int]]:
    """{initializer name: (offset, length) of its raw_data in `data`} for the main graph's
    initializers (ModelProto.graph = 7, GraphProto.initializer = 5, TensorProto.name = 8,
    raw_data = 9; the last occurrence of a field wins, as protobuf parses it). A name given
    to two initializers is left out: which bytes it means is not this scan's to decide."""
    spans: dict[str, tuple[int, int]] = {}
    seen: set[str] = set()
    repeated: set[str] = set()
    for field, wire, graph in fields(data, 0, len(data)):
        if field != 7 or wire != 2:
            continue
        for field, wire, tensor in fields(data, graph[0], graph[0] + graph[1]):
            if field != 5 or wire != 2:
                continue
            name, raw = None, None
            for field, wire, value in fields(data, tensor[0], tensor[0] + tensor[1]):
                if wire == 2 and field == 8:
                    name = bytes(data[value[0]:value[0] + value[1]]).decode("utf-8", "replace")
                elif wire == 2 and field == 9:
                    raw = value
            if name is None:
                continue
            (repeated if name in seen else seen).add(name)
            if raw is not None:
                spans[name] = raw
    return {name: span for name, span in spans.items() if name not in repeated}
