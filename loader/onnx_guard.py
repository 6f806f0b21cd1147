"""ONNX guards, run by the worker inside its sandbox before anything else touches the model.

In order: refuse pickle/zip by content; cap the byte size (well under protobuf's 2 GiB);
pre-scan the wire format for node count and If/Loop/Scan nesting (onnx_wire); parse from
bytes only (never a path, so onnx never resolves external files); check that the graph's inputs
and outputs fit metadata.json's dim rules (MAX_DIMS, MAX_DIM_NAME); then walk every graph,
subgraph and function iteratively to check the op allow-list (a domain the model imports but
never uses is no concern; a refused op is named with its domain and opset), the function count and
that no function calls itself (directly or through others), and every tensor: dims are
non-negative and their product cannot overflow int64, stored bytes equal dims x element size,
sparse tensors carry no external data, and `ConstantOfShape` of a constant shape stays under
a byte cap. External data is refused unless the caller passes `external` (the package's signed
sibling files, from memory); then each reference must name one of those files exactly and
use only the keys location/offset/length/checksum with in-bounds decimal offset and length,
and the bytes are copied into the returned model, which then carries no external references.
"""
import dataclasses
import functools
from collections.abc import Mapping

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import TensorProto, numpy_helper

from rtd.errors import Code, RtdError
from rtd import onnx_weights
from rtd.loader import formats, layout, metadata, onnx_wire

INT64_MAX = 2 ** 63 - 1
_BITS = {TensorProto.FLOAT: 32, TensorProto.UINT8: 8, TensorProto.INT8: 8, TensorProto.UINT16: 16,
         TensorProto.INT16: 16, TensorProto.INT32: 32, TensorProto.INT64: 64, TensorProto.BOOL: 8,
         TensorProto.FLOAT16: 16, TensorProto.DOUBLE: 64, TensorProto.UINT32: 32, TensorProto.UINT64: 64,
         TensorProto.COMPLEX64: 64, TensorProto.COMPLEX128: 128, TensorProto.BFLOAT16: 16,
         TensorProto.FLOAT8E4M3FN: 8, TensorProto.FLOAT8E4M3FNUZ: 8, TensorProto.FLOAT8E5M2: 8,
         TensorProto.FLOAT8E5M2FNUZ: 8, TensorProto.UINT4: 4, TensorProto.INT4: 4, TensorProto.FLOAT4E2M1: 4}
_TYPED_FIELDS = ("float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data")
_EXTERNAL_KEYS = frozenset({"location", "offset", "length", "checksum"})


@dataclasses.dataclass(frozen=True)
class GuardLimits:
    max_model_bytes: int = 1 << 30
    max_nodes: int = 250_000
    max_graph_depth: int = 16
    max_functions: int = 1000
    max_constant_of_shape_bytes: int = 1 << 30


@functools.cache
def default_allowed_ops() -> frozenset[tuple[str, str]]:
    """Every op of the standard ai.onnx domain (no custom domains, no ai.onnx.ml, no experimental)."""
    return frozenset(("", s.name) for s in onnx.defs.get_all_schemas_with_history() if s.domain in ("", "ai.onnx"))


def _domain(domain: str) -> str:
    return "" if domain == "ai.onnx" else domain


def _dims_product(tensor) -> int:
    count = 1
    for dim in tensor.dims:
        if dim < 0:
            raise RtdError(Code.E_ONNX_INVALID, f"tensor {tensor.name!r} has negative dim {dim}")
        count *= dim
        if count > INT64_MAX:
            raise RtdError(Code.E_ONNX_INVALID, f"tensor {tensor.name!r}: dims product overflows int64")
    return count


def _external_slice(tensor, external: Mapping | None, nbytes: int):
    """The validated bytes an external reference points at."""
    name = repr(tensor.name)
    if external is None:
        raise RtdError(Code.E_ONNX_EXTERNAL_DATA, f"tensor {name} uses external data, which is refused")
    entries = [(e.key, e.value) for e in tensor.external_data]
    keys = [k for k, _ in entries]
    if len(set(keys)) != len(keys) or not set(keys) <= _EXTERNAL_KEYS or "location" not in keys:
        raise RtdError(Code.E_ONNX_EXTERNAL_DATA, f"tensor {name}: external_data keys {keys}")
    info = dict(entries)
    location = info["location"]
    try:
        layout.check_component(location)
    except RtdError:
        raise RtdError(Code.E_ONNX_EXTERNAL_DATA, f"tensor {name}: location {location!r} is not a sibling name") from None
    if location.startswith("_ORT_") or location not in external:
        raise RtdError(Code.E_ONNX_EXTERNAL_DATA, f"tensor {name}: {location!r} is not a signed sibling file")
    for key in ("offset", "length"):
        if key in info and not (info[key].isascii() and info[key].isdigit() and len(info[key]) <= 19):
            raise RtdError(Code.E_ONNX_EXTERNAL_DATA, f"tensor {name}: {key}={info[key]!r}")
    blob = external[location]
    offset = int(info.get("offset", "0"))
    length = int(info.get("length", str(len(blob) - offset)))
    if offset + length > len(blob) or length != nbytes:
        raise RtdError(Code.E_ONNX_EXTERNAL_DATA,
                       f"tensor {name}: offset {offset} length {length} for {nbytes} bytes in a {len(blob)}-byte file")
    return blob[offset:offset + length]


def _check_tensor(tensor, external: Mapping | None, views: dict | None = None, spans: dict | None = None) -> None:
    count = _dims_product(tensor)
    dtype = tensor.data_type
    if dtype == TensorProto.STRING:
        bits = None
    elif dtype in _BITS:
        bits = _BITS[dtype]
    else:
        raise RtdError(Code.E_ONNX_INVALID, f"tensor {tensor.name!r} has unsupported data type {dtype}")
    nbytes = None if bits is None else (count * bits + 7) // 8
    if tensor.data_location == TensorProto.EXTERNAL or len(tensor.external_data):
        if bits is None:
            raise RtdError(Code.E_ONNX_EXTERNAL_DATA, f"string tensor {tensor.name!r} cannot be external")
        data = _external_slice(tensor, external, nbytes)
        if views is not None:   # left where it is: the caller serves it from its own mapping
            if tensor.name in views:
                raise RtdError(Code.E_ONNX_INVALID, f"two initializers are named {tensor.name!r}")
            views[tensor.name] = data
            return
        tensor.raw_data = bytes(data)
        del tensor.external_data[:]
        tensor.data_location = TensorProto.DEFAULT
        return
    if tensor.HasField("raw_data"):
        raw = len(tensor.raw_data)
    else:   # left where it is in the caller's bytes (onnx_weights.stripped: a name no other initializer has)
        raw = spans[tensor.name][1] if spans and tensor.name in spans else None
    if raw is not None:
        if bits is None or raw != nbytes:
            raise RtdError(Code.E_ONNX_INVALID, f"tensor {tensor.name!r}: raw_data is {raw} bytes, dims x size is {nbytes}")
        return
    stored = [len(getattr(tensor, f)) for f in _TYPED_FIELDS if len(getattr(tensor, f))]
    expected = {count, 2 * count} if dtype in (TensorProto.COMPLEX64, TensorProto.COMPLEX128) else {count}
    if bits is not None and bits < 8:
        expected.add(nbytes)
    if len(stored) > 1 or (stored[0] if stored else 0) not in expected:
        raise RtdError(Code.E_ONNX_INVALID, f"tensor {tensor.name!r} stores {stored} values for {count} elements")


def _check_sparse(sparse, external: Mapping | None) -> None:
    for part in (sparse.values, sparse.indices):
        if part.data_location == TensorProto.EXTERNAL or len(part.external_data):
            raise RtdError(Code.E_ONNX_EXTERNAL_DATA, f"sparse tensor {part.name!r} uses external data")
        _check_tensor(part, external)
    if any(d < 0 for d in sparse.dims):
        raise RtdError(Code.E_ONNX_INVALID, "sparse tensor has a negative dim")


def _constant_of_shape_bytes(node, constants: dict) -> int | None:
    shape = constants.get(node.input[0]) if node.input else None
    if shape is None or shape.data_type not in (TensorProto.INT64, TensorProto.INT32):
        return None   # not a static shape: the worker's memory limits are the backstop
    dims = numpy_helper.to_array(shape).astype(np.int64, copy=False).ravel().tolist()
    count, bits = 1, 32
    for dim in dims:
        count *= max(dim, 0)
    for attr in node.attribute:
        if attr.name == "value":
            bits = _BITS.get(attr.t.data_type, 64)
    return (count * bits + 7) // 8


def _check_signature(graph) -> None:
    """The graph's inputs and outputs stay within what metadata.json can state of them."""
    for value in list(graph.input) + list(graph.output):
        dims = value.type.tensor_type.shape.dim if value.type.HasField("tensor_type") else ()
        if len(dims) > metadata.MAX_DIMS or any(len(d.dim_param) > metadata.MAX_DIM_NAME for d in dims):
            raise RtdError(Code.E_ONNX_LIMIT, f"{value.name[:64]!r}: over {metadata.MAX_DIMS} dims or a symbolic "
                           f"dim name over {metadata.MAX_DIM_NAME} characters")


class _Walk:
    def __init__(self, model, allowed_ops, external, limits: GuardLimits):
        self.allowed, self.external, self.limits = allowed_ops, external, limits
        self.functions = {(_domain(f.domain), f.name): f for f in model.functions}
        if len(model.functions) > limits.max_functions:
            raise RtdError(Code.E_ONNX_LIMIT, f"{len(model.functions)} functions, over {limits.max_functions}")
        if len(self.functions) != len(model.functions):
            raise RtdError(Code.E_ONNX_INVALID, "two model functions share a (domain, name)")
        self.calls: dict[tuple, set] = {key: set() for key in self.functions}
        self.opsets = {_domain(o.domain): o.version for o in model.opset_import}   # to name a refused op
        for o in (o for f in model.functions for o in f.opset_import):
            self.opsets.setdefault(_domain(o.domain), o.version)

    def op(self, node, caller) -> None:
        key = (_domain(node.domain), node.op_type)
        if key in self.functions:
            if caller is not None:
                self.calls[caller].add(key)
        elif key not in self.allowed:
            opset = self.opsets.get(key[0])
            raise RtdError(Code.E_ONNX_OP_FORBIDDEN, f"{key[0] or 'ai.onnx'} {key[1]} "
                           f"({'domain not imported' if opset is None else f'opset {opset}'})")

    def nodes(self, nodes, graph_tensors, caller) -> list:
        """Check nodes; return the subgraphs they hold."""
        constants = {t.name: t for t in graph_tensors}
        subgraphs = []
        for node in nodes:
            self.op(node, caller)
            for attr in node.attribute:
                if attr.HasField("t"):
                    _check_tensor(attr.t, self.external)
                    if node.op_type == "Constant" and node.output:
                        constants[node.output[0]] = attr.t
                for tensor in attr.tensors:
                    _check_tensor(tensor, self.external)
                if attr.HasField("sparse_tensor"):
                    _check_sparse(attr.sparse_tensor, self.external)
                for sparse in attr.sparse_tensors:
                    _check_sparse(sparse, self.external)
                subgraphs.extend([attr.g] if attr.HasField("g") else [])
                subgraphs.extend(attr.graphs)
            if node.op_type == "ConstantOfShape" and _domain(node.domain) == "":
                size = _constant_of_shape_bytes(node, constants)
                if size is not None and size > self.limits.max_constant_of_shape_bytes:
                    raise RtdError(Code.E_ONNX_LIMIT, f"ConstantOfShape {node.name!r} makes {size} bytes")
        return subgraphs

    def body(self, nodes, initializers=(), sparse_initializers=(), caller=None, views: dict | None = None,
             spans: dict | None = None) -> None:
        """A graph or function body and, iteratively, every subgraph inside it; `views` takes
        the external data of this body's own initializers (not its subgraphs'); `spans` has the
        lengths of the raw_data left out of them (onnx_weights.stripped)."""
        stack = [(nodes, initializers, sparse_initializers, views, spans)]
        while stack:
            nodes, initializers, sparse_initializers, views, spans = stack.pop()
            for tensor in initializers:
                _check_tensor(tensor, self.external, views, spans)
            for sparse in sparse_initializers:
                _check_sparse(sparse, self.external)
            stack.extend((g.node, g.initializer, g.sparse_initializer, None, None)
                         for g in self.nodes(nodes, initializers, caller))

    def no_recursion(self) -> None:
        """Kahn's algorithm over the local call graph: anything left over sits on a cycle."""
        callers = {key: 0 for key in self.calls}
        for callees in self.calls.values():
            for callee in callees:
                callers[callee] += 1
        ready = [key for key, n in callers.items() if n == 0]
        while ready:
            for callee in self.calls[ready.pop()]:
                callers[callee] -= 1
                if callers[callee] == 0:
                    ready.append(callee)
        if cyclic := sorted(key for key, n in callers.items() if n > 0):
            raise RtdError(Code.E_ONNX_LIMIT, f"recursive model functions: {cyclic[:3]}")


def check_model(data, *, allowed_ops: set[tuple[str, str]] | None = None, external: Mapping | None = None,
                views: dict | None = None, limits: GuardLimits = GuardLimits()) -> onnx.ModelProto:
    """Parse and check an ONNX model from bytes; return it with any external data inlined,
    except, given a `views` dict, the main graph's initializers': their validated bytes go
    into views[name], no copy made -- slices of `external`'s buffers for external data (the
    model still names them), slices of `data` itself for raw_data (found by their wire
    offsets and never parsed: rtd/onnx_weights.py). The caller keeps `data` and `external` mapped for
    as long as it uses the views."""
    with memoryview(data) as view:   # released on any exit, so the caller can close its memfd
        model, spans = _check(view, allowed_ops, external, views, limits)
    for tensor in model.graph.initializer if spans else ():
        if tensor.name in spans and not tensor.HasField("raw_data") and tensor.name not in views:
            offset, length = spans[tensor.name]   # its length checked by the walk
            views[tensor.name] = memoryview(data)[offset:offset + length]
    return model


def _check(view: memoryview, allowed_ops, external, views, limits: GuardLimits) -> tuple[onnx.ModelProto, dict]:
    formats.refuse_unsafe(view, "model")
    if len(view) > limits.max_model_bytes:
        raise RtdError(Code.E_ONNX_LIMIT, f"model is {len(view)} bytes, over {limits.max_model_bytes}")
    onnx_wire.scan(view, max_depth=limits.max_graph_depth, max_nodes=limits.max_nodes)
    # with views, the main graph's raw weights are never parsed: the parser would copy them all
    source, spans = onnx_weights.stripped(view) if views is not None else (view, {})
    model = onnx.ModelProto()
    try:
        model.ParseFromString(source)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise RtdError(Code.E_ONNX_PARSE, str(e) or type(e).__name__) from None
    if model.ir_version <= 0 or not model.HasField("graph"):
        raise RtdError(Code.E_ONNX_PARSE, "no ir_version or no graph")
    allowed = {(_domain(d), op) for d, op in (allowed_ops if allowed_ops is not None else default_allowed_ops())}
    walk = _Walk(model, allowed, external, limits)
    _check_signature(model.graph)
    for graph in [model.graph] + [g for t in model.training_info for g in (t.initialization, t.algorithm)]:
        walk.body(graph.node, graph.initializer, graph.sparse_initializer, views=views if graph is model.graph else None,
                  spans=spans if graph is model.graph else None)
    for key, function in walk.functions.items():
        walk.body(function.node, caller=key)
    walk.no_recursion()
    return model, spans
