"""Constant weights whose every reader is a product kept only as the GEMM's panels (the CPU's last
compile-time pass).

A transformer's weights are nearly all products' weights. Packing them on the first run beside the loader's
arrays held each one twice (bert_base: 419 MiB of arrays and 326 MiB of panels); onnxruntime frees an
initializer once its kernels have pre-packed it. Here the panels take the weight's place in the graph as a
constant of their own, each reader (a MatMulBias, or a MatMul by the weight, which becomes one without a bias)
says so by its `packed_shape`, and the array goes with the last reference to it: one weight at a time, so the
compile's peak holds one weight twice at most. A weight anything else reads (a tied embedding's Gather, a
subgraph, the graph's outputs) stays as it is.
"""
import numpy as np

from ..ir import RTD_DOMAIN, Graph
from ..native.gemm import pack_weight


def _reads_as_weight(node, name: str) -> bool:
    product = (node.domain, node.op_type) in ((RTD_DOMAIN, "MatMulBias"), ("", "MatMul"))
    return product and node.inputs[1] == name and name not in node.inputs[:1] + node.inputs[2:] \
        and "packed_shape" not in node.attrs


def pack_weights(graph: Graph) -> Graph:
    """The graph with each float32 weight that only products read as their weight replaced by its panels."""
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
            if node.domain == "":   # MatMul(a, w): a MatMulBias without a bias, the same rows by the same GEMM
                node.op_type, node.domain, node.attrs = "MatMulBias", RTD_DOMAIN, {}
            node.inputs[1] = panels_name
            node.attrs["packed_shape"] = tuple(weight.shape)
        graph.constants[panels_name] = panels
        del graph.constants[name], weight   # the array is freed here unless its caller still holds it
    return graph
