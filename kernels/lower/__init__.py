"""The lowering pipeline: named passes over the IR, with the IR invariant checked on the result.

`lower(graph)` runs the compile-time passes once per model; `lower_signature(graph, trace)`
runs the ones that need a shape signature (what one traced run saw) once per signature.
"""
import copy

import numpy as np

from rtd.errors import RtdError

from ..graph import GraphRunner
from ..ir import Graph, check
from .bodies import constants_into_bodies, inline_static_ifs
from .chains import fuse_chains, fuse_conv_chains
from .fold import fold_constants, fold_signature
from .qdq import fuse_qdq
from .patterns import (batchnorm_as_affine, fold_conv_batchnorm, fuse_attention, fuse_conv_activation, fuse_gelu, fuse_layernorm, fuse_matmul_bias, fuse_softmax,
                       square_pows)
from .shapes import static_shapes
from .siblings import batch_sibling_products
from .simplify import eliminate_dead, eliminate_identity

PASSES = (
    ("fuse_qdq", fuse_qdq),   # before folding turns the weights' DequantizeLinear into float weights
    ("fold_constants", fold_constants),
    ("constants_into_bodies", constants_into_bodies),
    ("inline_static_ifs", inline_static_ifs),
    ("eliminate_identity", eliminate_identity),
    ("eliminate_dead", eliminate_dead),
    ("fold_conv_batchnorm", fold_conv_batchnorm),
    ("fuse_layernorm", fuse_layernorm),
    ("fuse_softmax", fuse_softmax),
    ("fuse_gelu", fuse_gelu),
    ("fuse_attention", fuse_attention),
    ("fuse_matmul_bias", fuse_matmul_bias),
    ("fuse_conv_activation", fuse_conv_activation),
)


def lower(graph: Graph, disable=()) -> Graph:
    """The compile-time passes, minus those named in `disable`; the result is checked (once: a check after
    every pass cost a tenth of a large model's compile time).

    A fusion leaves the nodes it replaced for dead-node elimination, which runs after every
    pass so the next pass counts only live consumers. The nodes are copied first: a body's raw graph
    (its interpreter's) and earlier plans share them, and passes reassign their fields.
    """
    graph.nodes = [node.editable() for node in graph.nodes]
    for name, run_pass in PASSES:
        if name not in disable:
            graph = run_pass(graph)
            if "eliminate_dead" not in disable:
                graph = eliminate_dead(graph)
    check(graph, outer=set())
    return graph


MAX_INLINED_LEVELS = 8   # nested Ifs whose conditions only fold once the level above is inlined


def lower_signature(graph: Graph, trace: dict, disable=(), xp=np) -> tuple:
    """A copy of `graph` specialised to one signature, and (shapes, statically shaped names).

    Ifs whose conditions the signature fixes are inlined (their branches lowered with the graph and
    traced again, on `xp`, for the shapes of the values they compute)."""
    graph = copy.copy(graph)
    graph.nodes, graph.constants = list(graph.nodes), dict(graph.constants)
    if "fold_signature" not in disable:
        graph = eliminate_dead(fold_signature(graph, trace))
        graph = _casts_to_their_own_dtype(graph, trace)
        check(graph, outer=set())
        for _ in range(MAX_INLINED_LEVELS):
            if "inline_static_ifs" in disable or not _inlines(graph):
                break
            graph = lower(inline_static_ifs(graph), disable)
            trace = dict(GraphRunner(graph, xp).trace({name: trace[name] for name in graph.inputs}).maps[0],
                         **{name: trace[name] for name in graph.inputs})
            graph = eliminate_dead(fold_signature(graph, trace))
            check(graph, outer=set())
    shapes = {name: (tuple(v.shape), v.dtype) for name, v in trace.items() if hasattr(v, "shape") and hasattr(v, "dtype")}
    if "batch_sibling_products" not in disable:
        graph = batch_sibling_products(graph, shapes)
        check(graph, outer=set())
    if "batchnorm_as_affine" not in disable:
        graph = batchnorm_as_affine(graph, shapes)
    static = static_shapes(graph, set(graph.constants))
    steady: set = set()
    for node in graph.nodes:   # in order: a Loop after one whose carried values keep their shapes sees them fixed
        if node.op_type == "Loop" and node.domain == "":
            kept = _steady_carried(node, trace, graph.constants, static)
            if kept:
                steady |= set(kept)
                static = static_shapes(graph, set(graph.constants), steady)
    if "square_pows" not in disable:
        graph = square_pows(graph, shapes)
    if "fuse_chains" not in disable:
        graph = fuse_chains(graph, shapes, static)
        check(graph, outer=set())
    if "fuse_conv_chains" not in disable and "fuse_chains" not in disable:
        graph = fuse_conv_chains(graph, shapes)
        check(graph, outer=set())
    return graph, shapes, static


def _casts_to_their_own_dtype(graph: Graph, trace: dict) -> Graph:
    """Casts of values that already have the target dtype, as the signature shows them, dropped, their readers
    reading the input (a plan step fewer: the bool Cast an exporter puts before an If). A graph output or a name a
    body reads stays. Only the readers are copied: the other nodes stay the ones the compile-time kernels were made
    for (a tree ensemble's tables are built once)."""
    def dtype(name):
        return getattr(trace[name] if name in trace else graph.constants.get(name), "dtype", None)
    pinned = set(graph.outputs) | {n for node in graph.nodes for n in node.implicit}
    rename: dict = {}
    nodes = []
    for node in graph.nodes:
        if any(n in rename for n in node.inputs):
            node = node.editable()
            node.inputs = [rename.get(n, n) for n in node.inputs]
        if node.op_type == "Cast" and node.domain == "" and node.inputs[0] and node.outputs[0] not in pinned \
                and dtype(node.inputs[0]) is not None and dtype(node.inputs[0]) == dtype(node.outputs[0]):
            rename[node.outputs[0]] = node.inputs[0]
            continue
        nodes.append(node)
    graph.nodes = nodes
    return graph


def _steady_carried(node, trace: dict, constants: dict, static: set) -> list:
    """A Loop's carried outputs whose shapes the signature fixes, or []: where its carried inputs' and the
    names its body reads from outside have fixed shapes, the body's carried outputs have shapes its inputs'
    shapes fix (static_shapes of the body), and one run of the body on the traced inputs gives each carried
    value back with its own shape and dtype, every iteration does, so after any trip count (0 included)
    each output has its input's shape: what follows the Loop can then be planned natively."""
    body = node.attrs.get("body")
    carried = node.inputs[2:]
    if not isinstance(body, Graph) or not carried or len(body.inputs) != 2 + len(carried) \
            or any(not n or n not in static for n in carried) or any(n not in static for n in node.implicit):
        return []
    body_static = static_shapes(body, set(body.constants), set(node.implicit))
    if any(o not in body_static for o in body.outputs[1 : 1 + len(carried)]):
        return []
    def value(name):
        return trace[name] if name in trace else constants.get(name)
    feeds = {body.inputs[0]: np.array(0, np.int64), body.inputs[1]: np.array(True),
             **{name: value(outer) for name, outer in zip(body.inputs[2:], carried)}}
    scope = {n: value(n) for n in node.implicit}
    if not all(type(v) is np.ndarray for v in [*feeds.values(), *scope.values()]):
        return []   # a value the trace kept only as its shape, or a sequence
    try:
        env = GraphRunner(body).trace(feeds, scope)
    except (RtdError, ValueError, IndexError, TypeError, ArithmeticError):
        return []   # a body that cannot run on the loop's first values (a trip count of 0 in the trace)
    for name, given in zip(body.outputs[1 : 1 + len(carried)], body.inputs[2:]):
        out, start = env[name], feeds[given]
        if not hasattr(out, "shape") or tuple(out.shape) != start.shape or out.dtype != start.dtype:
            return []
    return list(node.outputs[: len(carried)])


def _inlines(graph: Graph) -> bool:
    """Whether an If of `graph` has a constant condition."""
    return any(node.op_type == "If" and node.domain == "" and node.inputs and node.inputs[0] in graph.constants
               for node in graph.nodes)
