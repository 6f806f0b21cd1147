"""Constant weights whose every reader is a MatMulBias kept only as the GEMM's panels (the CPU's last
compile-time pass).

A transformer's weights are nearly all products' weights. Packing them on the first run beside the loader's
arrays held each one twice (bert_base: 419 MiB of arrays and 326 MiB of panels); onnxruntime frees an
initializer once its kernels have pre-packed it. Here the panels take the weight's place in the graph as a
constant of their own, each reader's `packed_shape` says so, and the array goes with the last reference to
it: one weight at a time, so the compile's peak holds one weight twice at most. A weight anything else reads
(a tied embedding's Gather, a subgraph, the graph's outputs) stays as it is.
"""
import numpy as np

from ..ir import RTD_DOMAIN, Graph
from ..native.gemm import pack_weight


def _reads_as_weight(node, name: str) -> bool:
    return node.op_type == "MatMulBias" and node.domain == RTD_DOMAIN and node.inputs[1] == name \
        and name not in node.inputs[:1] + node.inputs[2:] and "packed_shape" not in node.attrs


def pack_weights(graph: Graph) -> Graph:
    """The graph with each float32 weight that only MatMulBias nodes read replaced by its panels."""
    readers = graph.consumers()
    taken = set(graph.constants) | set(graph.inputs) | {name for node in graph.nodes for name in node.outputs}
    for name in [n for n in graph.constants if n not in graph.outputs]:
        nodes = readers.get(name, [])
        weight = graph.constants[name]
        if not nodes or not all(_reads_as_weight(node, name) for node in nodes) \
                or weight.dtype != np.float32 or weight.ndim != 2:
            continue
        panels = pack_weight(weight)
        if panels is None:
            continue
        panels_name = name + "__panels"
        while panels_name in taken:
            panels_name += "_"
        taken.add(panels_name)
        for node in nodes:
            node.inputs[1] = panels_name
            node.attrs["packed_shape"] = tuple(weight.shape)
        graph.constants[panels_name] = panels
        del graph.constants[name], weight   # the array is freed here unless its caller still holds it
    return graph
