"""A plain interpreter of an ONNX graph over the op registry: the reference the compiler lowers.

Each node becomes a kernel instance at construction (so an unsupported op refuses at compile
time); `GraphRunner(feeds, scope)` walks the nodes in order over a name → array environment.
Subgraph attributes (If/Loop/Scan bodies) become nested GraphRunners.
"""
from collections import ChainMap

import numpy as np
import onnx
from onnx import numpy_helper

from rtd.errors import Code, RtdError

from .ops import lookup


def attribute_value(attr: onnx.AttributeProto, opsets: dict, xp):
    """An attribute as the kernels see it: numbers, str, ndarrays, GraphRunners."""
    A = onnx.AttributeProto
    if attr.type == A.GRAPH:
        return GraphRunner(attr.g, opsets, xp)
    if attr.type == A.GRAPHS:
        return [GraphRunner(g, opsets, xp) for g in attr.graphs]
    if attr.type == A.TENSOR:
        return numpy_helper.to_array(attr.t)
    if attr.type == A.STRING:
        return attr.s.decode("utf-8", "replace")
    if attr.type == A.STRINGS:
        return [s.decode("utf-8", "replace") for s in attr.strings]
    if attr.type in (A.INTS, A.FLOATS):
        return list(onnx.helper.get_attribute_value(attr))
    return onnx.helper.get_attribute_value(attr)


class GraphRunner:
    def __init__(self, graph: onnx.GraphProto, opsets: dict[str, int], xp=np):
        self.xp = xp
        self.constants = {t.name: xp.asarray(numpy_helper.to_array(t)) for t in graph.initializer}
        self.input_names = [v.name for v in graph.input if v.name not in self.constants]
        self.output_names = [v.name for v in graph.output]
        self.nodes = []
        for node in graph.node:
            domain = "" if node.domain == "ai.onnx" else node.domain
            if domain not in opsets:
                raise RtdError(Code.E_OP_UNSUPPORTED, f"{node.op_type}: domain {domain!r} not imported by the model")
            cls = lookup(domain, node.op_type, opsets[domain])
            attrs = {a.name: attribute_value(a, opsets, xp) for a in node.attribute}
            self.nodes.append((list(node.input), list(node.output), cls(attrs, xp)))

    def __call__(self, feeds: dict, scope=None) -> list:
        env = ChainMap({}, feeds, self.constants, *([scope] if scope is not None else []))
        for inputs, outputs, kernel in self.nodes:
            args = [env[name] if name else None for name in inputs]
            results = kernel.run(*args, scope=env) if kernel.needs_scope else kernel.run(*args)
            for name, value in zip(outputs, results):
                if name:
                    env[name] = value
        return [env[name] for name in self.output_names]
