"""The lowering pipeline: named passes over the IR, with the IR invariant checked after each.

`lower(graph)` runs the compile-time passes once per model; `lower_signature(graph, trace)`
runs the ones that need a shape signature (what one traced run saw) once per signature.
"""
import copy

import numpy as np

from ..graph import GraphRunner
from ..ir import Graph, check
from .bodies import constants_into_bodies, inline_static_ifs
from .chains import fuse_chains, fuse_conv_chains
from .fold import fold_constants, fold_signature
from .qdq import fuse_qdq
from .patterns import (fold_conv_batchnorm, fuse_attention, fuse_conv_activation, fuse_gelu, fuse_layernorm, fuse_matmul_bias, fuse_softmax,
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
    """The compile-time passes, minus those named in `disable`; each result is checked.

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
    static = static_shapes(graph, set(graph.constants))
    if "square_pows" not in disable:
        graph = square_pows(graph, shapes)
    if "fuse_chains" not in disable:
        graph = fuse_chains(graph, shapes, static)
        check(graph, outer=set())
    if "fuse_conv_chains" not in disable and "fuse_chains" not in disable:
        graph = fuse_conv_chains(graph, shapes)
        check(graph, outer=set())
    return graph, shapes, static


def _inlines(graph: Graph) -> bool:
    """Whether an If of `graph` has a constant condition."""
    return any(node.op_type == "If" and node.domain == "" and node.inputs and node.inputs[0] in graph.constants
               for node in graph.nodes)
