"""What the operator's tooling reads from a model's bytes, without the onnx package (whose import
alone costs `rtctl pack` a third of a second): the main graph's inputs, outputs and initializer
names with their declared types and dims, the producers of its values, the class labels of the
ZipMaps that make outputs, and the files its tensors' external data name. Field numbers are
onnx.proto's; the walk is rtd.protowire's (malformed bytes are E_ONNX_PARSE). The daemon never calls
this: the model is the operator's own, read on the operator's side."""
import dataclasses

from rtd.errors import Code
from rtd.protowire import LENGTH, VARINT, Walker

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


def _text(w: Walker, span) -> str:
    return bytes(w.buf[span[0]:span[1]]).decode("utf-8", "replace")


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


def _dim(w: Walker, span):
    value = param = None
    for field, wire, v in w.fields(*span):   # a oneof: the last one given counts
        if field == DIM_VALUE and wire == VARINT:
            value, param = _int64(v), None
        elif field == DIM_PARAM and wire == LENGTH:
            value, param = None, _text(w, v)
    return value if value is not None and value >= 0 else (param or None)


def _value(w: Walker, span) -> Value:
    value = Value("")
    for field, wire, v in w.fields(*span):
        if field == VALUE_NAME and wire == LENGTH:
            value.name = _text(w, v)
        elif field == VALUE_TYPE and wire == LENGTH:
            for tf, tw, tensor in w.fields(*v):
                if tf != TYPE_TENSOR or tw != LENGTH:
                    continue
                for ef, ew, e in w.fields(*tensor):
                    if ef == TENSOR_ELEM_TYPE and ew == VARINT:
                        value.elem_type = e
                    elif ef == TENSOR_SHAPE and ew == LENGTH:
                        value.dims = [_dim(w, d) for df, dw, d in w.fields(*e) if df == SHAPE_DIM and dw == LENGTH]
    return value


def _ints(w: Walker, wire: int, v) -> list[int]:
    """A repeated int64 field's occurrence: one varint, or a packed run of them."""
    if wire == VARINT:
        return [_int64(v)]
    out, (pos, end) = [], v
    while pos < end:
        n, pos = w.varint(pos, end)
        out.append(_int64(n))
    return out


def _node(w: Walker, span) -> Node:
    node, strings, ints = Node(), [], []
    for field, wire, v in w.fields(*span):
        if wire == LENGTH and field == NODE_INPUT:
            node.inputs.append(_text(w, v))
        elif wire == LENGTH and field == NODE_OUTPUT:
            node.outputs.append(_text(w, v))
        elif wire == LENGTH and field == NODE_OP_TYPE:
            node.op_type = _text(w, v)
        elif wire == LENGTH and field == NODE_DOMAIN:
            node.domain = _text(w, v)
        elif wire == LENGTH and field == NODE_ATTRIBUTE:
            name, values = "", []
            for af, aw, a in w.fields(*v):
                if af == ATTR_NAME and aw == LENGTH:
                    name = _text(w, a)
                elif af == ATTR_STRINGS and aw == LENGTH:
                    values.append(_text(w, a))
                elif af == ATTR_INTS and aw in (VARINT, LENGTH):
                    values += _ints(w, aw, a)
            if name == "classlabels_strings":
                strings = values
            elif name == "classlabels_int64s":
                ints = values
    if (node.op_type, node.domain) == ("ZipMap", "ai.onnx.ml"):
        node.labels = strings or ints
    return node


def _graph(w: Walker) -> tuple[int, int] | None:
    span = None
    for field, wire, v in w.fields(0, len(w.buf)):
        if field == MODEL_GRAPH and wire == LENGTH:
            span = v
    return span


def graph_io(data) -> GraphIO:
    """The main graph's declared inputs and outputs, initializer names and nodes."""
    w = Walker(data, Code.E_ONNX_PARSE)
    io = GraphIO([], [], set(), [])
    span = _graph(w)
    for field, wire, v in w.fields(*span) if span else ():
        if wire != LENGTH:
            continue
        if field == GRAPH_INPUT:
            io.inputs.append(_value(w, v))
        elif field == GRAPH_OUTPUT:
            io.outputs.append(_value(w, v))
        elif field == GRAPH_NODE:
            io.nodes.append(_node(w, v))
        elif field == GRAPH_INITIALIZER:
            io.initializers.update(_text(w, t) for tf, tw, t in w.fields(*v) if tf == TENSOR_NAME and tw == LENGTH)
    return io


def external_locations(data) -> set[str]:
    """The `location` of every tensor's external data: the main graph's initializers and tensor
    attributes, its subgraphs' included."""
    w = Walker(data, Code.E_ONNX_PARSE)
    found, graphs = set(), [span] if (span := _graph(w)) else []
    while graphs:
        start, end = graphs.pop()
        tensors = []
        for field, wire, v in w.fields(start, end):
            if wire == LENGTH and field == GRAPH_INITIALIZER:
                tensors.append(v)
            elif wire == LENGTH and field == GRAPH_NODE:
                for nf, nw, attr in w.fields(*v):
                    if nf != NODE_ATTRIBUTE or nw != LENGTH:
                        continue
                    for af, aw, a in w.fields(*attr):
                        if aw == LENGTH and af in (ATTR_T, ATTR_TENSORS):
                            tensors.append(a)
                        elif aw == LENGTH and af in (ATTR_G, ATTR_GRAPHS):
                            graphs.append(a)
        for tensor in tensors:
            for tf, tw, entry in w.fields(*tensor):
                if tf != TENSOR_EXTERNAL_DATA or tw != LENGTH:
                    continue
                pair = {ef: _text(w, e) for ef, ew, e in w.fields(*entry) if ew == LENGTH}
                if pair.get(1) == "location" and 2 in pair:
                    found.add(pair[2])
    return found
