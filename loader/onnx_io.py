"""What the operator's tooling reads from a model's bytes, without the onnx package (whose import
alone costs `rtctl pack` a third of a second): the main graph's inputs, outputs and initializer
names with their declared types and dims, the producers of its values, the class labels of the
ZipMaps that make outputs, and the files its tensors' external data name. Field numbers are
onnx.proto's; the walk is onnx_wire's (malformed bytes are E_ONNX_PARSE). The daemon never calls
this: the model is the operator's own, read on the operator's side."""
import dataclasses

from rtd.loader.onnx_wire import fields, varint

# onnx.TensorProto.DataType by number (fixed by onnx.proto; tests/loader/test_onnx_io.py holds it to onnx's)
DATA_TYPES = ("UNDEFINED", "FLOAT", "UINT8", "INT8", "UINT16", "INT16", "INT32", "INT64", "STRING", "BOOL", "FLOAT16",
              "DOUBLE", "UINT32", "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ",
              "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4", "INT4", "FLOAT4E2M1", "FLOAT8E8M0", "UINT2", "INT2",
              "FLOAT6E2M3", "FLOAT6E3M2")
MODEL_GRAPH = 7
GRAPH_NODE, GRAPH_INITIALIZER, GRAPH_INPUT, GRAPH_OUTPUT = 1, 5, 11, 12
NODE_INPUT, NODE_OUTPUT, NODE_OP_TYPE, NODE_ATTRIBUTE, NODE_DOMAIN = 1, 2, 4, 5, 7
ATTR_NAME, ATTR_T, ATTR_G, ATTR_INTS, ATTR_STRINGS, ATTR_TENSORS, ATTR_GRAPHS = 1, 5, 6, 8, 9, 10, 11
TENSOR_NAME, TENSOR_EXTERNAL_DATA = 8, 13
VALUE_NAME, VALUE_TYPE, TYPE_TENSOR, TENSOR_ELEM_TYPE, TENSOR_SHAPE, SHAPE_DIM, DIM_VALUE, DIM_PARAM = 1, 2, 1, 1, 2, 1, 1, 2


def _text(data, span) -> str:
    return bytes(data[span[0]:span[0] + span[1]]).decode("utf-8", "replace")


def _inside(span) -> tuple[int, int]:
    return span[0], span[0] + span[1]


def _int64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


@dataclasses.dataclass
class Value:
    """A graph input or output as declared: `dims` as rtd.dtypes.declared_dims states them
    (an int, a symbolic name or None per dim), [] where the type has no shape."""
    name: str
    elem_type: int = 0
    dims: list = dataclasses.field(default_factory=list)

    @property
    def dtype(self) -> str:
        return DATA_TYPES[self.elem_type] if self.elem_type < len(DATA_TYPES) else "UNDEFINED"


@dataclasses.dataclass
class Node:
    op_type: str = ""
    domain: str = ""
    inputs: list = dataclasses.field(default_factory=list)
    outputs: list = dataclasses.field(default_factory=list)
    labels: list | None = None   # a ZipMap's classlabels_strings or classlabels_int64s


@dataclasses.dataclass
class GraphIO:
    inputs: list
    outputs: list
    initializers: set
    nodes: list


def _dim(data, span):
    value = param = None
    for field, wire, v in fields(data, *_inside(span)):   # a oneof: the last one given counts
        if field == DIM_VALUE and wire == 0:
            value, param = _int64(v), None
        elif field == DIM_PARAM and wire == 2:
            value, param = None, _text(data, v)
    return value if value is not None and value >= 0 else (param or None)


def _value(data, span) -> Value:
    value = Value("")
    for field, wire, v in fields(data, *_inside(span)):
        if field == VALUE_NAME and wire == 2:
            value.name = _text(data, v)
        elif field == VALUE_TYPE and wire == 2:
            for tf, tw, tensor in fields(data, *_inside(v)):
                if tf != TYPE_TENSOR or tw != 2:
                    continue
                for ef, ew, e in fields(data, *_inside(tensor)):
                    if ef == TENSOR_ELEM_TYPE and ew == 0:
                        value.elem_type = e
                    elif ef == TENSOR_SHAPE and ew == 2:
                        value.dims = [_dim(data, d) for df, dw, d in fields(data, *_inside(e)) if df == SHAPE_DIM and dw == 2]
    return value


def _ints(data, wire: int, v) -> list[int]:
    """A repeated int64 field's occurrence: one varint, or a packed run of them."""
    if wire == 0:
        return [_int64(v)]
    out, (pos, end) = [], _inside(v)
    while pos < end:
        n, pos = varint(data, pos, end)
        out.append(_int64(n))
    return out


def _node(data, span) -> Node:
    node, strings, ints = Node(), [], []
    for field, wire, v in fields(data, *_inside(span)):
        if wire == 2 and field == NODE_INPUT:
            node.inputs.append(_text(data, v))
        elif wire == 2 and field == NODE_OUTPUT:
            node.outputs.append(_text(data, v))
        elif wire == 2 and field == NODE_OP_TYPE:
            node.op_type = _text(data, v)
        elif wire == 2 and field == NODE_DOMAIN:
            node.domain = _text(data, v)
        elif wire == 2 and field == NODE_ATTRIBUTE:
            name, values = "", []
            for af, aw, a in fields(data, *_inside(v)):
                if af == ATTR_NAME and aw == 2:
                    name = _text(data, a)
                elif af == ATTR_STRINGS and aw == 2:
                    values.append(_text(data, a))
                elif af == ATTR_INTS:
                    values += _ints(data, aw, a)
            if name == "classlabels_strings":
                strings = values
            elif name == "classlabels_int64s":
                ints = values
    if (node.op_type, node.domain) == ("ZipMap", "ai.onnx.ml"):
        node.labels = strings or ints
    return node


def _graph(data) -> tuple[int, int] | None:
    span = None
    for field, wire, v in fields(data, 0, len(data)):
        if field == MODEL_GRAPH and wire == 2:
            span = v
    return span


def graph_io(data) -> GraphIO:
    """The main graph's declared inputs and outputs, initializer names and nodes."""
    io = GraphIO([], [], set(), [])
    span = _graph(data)
    for field, wire, v in fields(data, *_inside(span)) if span else ():
        if wire != 2:
            continue
        if field == GRAPH_INPUT:
            io.inputs.append(_value(data, v))
        elif field == GRAPH_OUTPUT:
            io.outputs.append(_value(data, v))
        elif field == GRAPH_NODE:
            io.nodes.append(_node(data, v))
        elif field == GRAPH_INITIALIZER:
            io.initializers.update(_text(data, t) for tf, tw, t in fields(data, *_inside(v)) if tf == TENSOR_NAME and tw == 2)
    return io


def external_locations(data) -> set[str]:
    """The `location` of every tensor's external data: the main graph's initializers and tensor
    attributes, its subgraphs' included."""
    found, graphs = set(), [_inside(span)] if (span := _graph(data)) else []
    while graphs:
        start, end = graphs.pop()
        tensors = []
        for field, wire, v in fields(data, start, end):
            if wire == 2 and field == GRAPH_INITIALIZER:
                tensors.append(v)
            elif wire == 2 and field == GRAPH_NODE:
                for nf, nw, attr in fields(data, *_inside(v)):
                    if nf != NODE_ATTRIBUTE or nw != 2:
                        continue
                    for af, aw, a in fields(data, *_inside(attr)):
                        if aw == 2 and af in (ATTR_T, ATTR_TENSORS):
                            tensors.append(a)
                        elif aw == 2 and af in (ATTR_G, ATTR_GRAPHS):
                            graphs.append(_inside(a))
        for tensor in tensors:
            for tf, tw, entry in fields(data, *_inside(tensor)):
                if tf != TENSOR_EXTERNAL_DATA or tw != 2:
                    continue
                pair = {ef: _text(data, e) for ef, ew, e in fields(data, *_inside(entry)) if ew == 2}
                if pair.get(1) == "location" and 2 in pair:
                    found.add(pair[2])
    return found
