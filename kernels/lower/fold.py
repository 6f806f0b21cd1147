"""Constant folding: at compile time over constants, and per shape signature over Shape chains.

`fold_constants` evaluates nodes whose inputs are all constants. `fold_signature` uses one
traced run for a shape signature: Shape/Size of a statically shaped value is a constant for
that signature, and so is everything computed only from constants (the Shape → Gather →
Unsqueeze → Concat → Reshape plumbing exporters emit), so those nodes leave the plan.
"""
import numpy as np

from rtd.errors import RtdError

from ..constant import read_only
from ..graph import make_kernel
from ..ir import RTD_DOMAIN, Graph
from .shapes import NONDETERMINISTIC, shape_fixed

_SLACK_BYTES = 1 << 20  # a folded value may exceed its inputs by this much (no Expand blow-ups)


def _foldable(node) -> bool:
    return node.domain != RTD_DOMAIN and node.op_type not in NONDETERMINISTIC and not node.implicit and not any(node.subgraphs())


def _small_enough(values, inputs) -> bool:
    budget = 4 * sum(x.nbytes for x in inputs if x is not None) + _SLACK_BYTES
    return all(isinstance(v, np.ndarray) for v in values) and sum(v.nbytes for v in values) <= budget


def _given_value(node):
    """A Constant's array where it is its one `value` attribute, already read-only (ir.tensor_value);
    else None. Exporters such as paddle2onnx emit hundreds of these."""
    if node.op_type != "Constant" or node.domain != "" or len(node.attrs) != 1 or len(node.outputs) != 1:
        return None
    value = node.attrs.get("value")
    return value if isinstance(value, np.ndarray) and not value.flags.writeable and node.outputs[0] else None


def fold_constants(graph: Graph) -> Graph:
    keep = []
    for node in graph.nodes:
        value = _given_value(node)
        if value is not None and _small_enough([value], []):
            graph.constants[node.outputs[0]] = value   # what its kernel would answer, without making one
            continue
        if _foldable(node) and all(n in graph.constants for n in node.inputs if n):
            args = [graph.constants[n] if n else None for n in node.inputs]
            kernel = make_kernel(node, graph.opsets)  # an unsupported op refuses here, at compile time
            try:
                values = kernel.run(*args)
            except (RtdError, ValueError, TypeError, IndexError, ArithmeticError):
                values = None  # leave it to run time, where it reports against real feeds
            if values is not None and _small_enough(values, args):
                graph.constants.update((name, read_only(v)) for name, v in zip(node.outputs, values) if name)
                continue
        keep.append(node)
    graph.nodes = keep
    return graph


def fold_signature(graph: Graph, trace: dict) -> Graph:
    """Replace nodes whose outputs are fixed by the signature with the values the trace saw."""
    static_values = set(graph.constants)
    shaped = set(graph.inputs) | static_values
    keep = []
    for node in graph.nodes:
        if node.domain == "" and node.op_type in ("Shape", "Size"):
            fixed = node.inputs[0] in shaped
        else:
            fixed = _foldable(node) and all(n in static_values for n in node.inputs if n)
        names = [n for n in node.outputs if n]
        outs = [np.asarray(v) if isinstance(v, np.generic) else v for v in (trace.get(n) for n in names)]
        ins = [trace.get(n) for n in node.inputs if n]
        if fixed and _small_enough(outs, [x for x in ins if isinstance(x, np.ndarray)]):
            graph.constants.update(zip(names, (read_only(np.array(v)) for v in outs)))   # copies: the trace's values went to the caller
            static_values.update(names)
            shaped.update(names)
            continue
        if shape_fixed(node, shaped, static_values):
            shaped.update(names)
        keep.append(node)
    graph.nodes = keep
    return graph
