"""The plain interpreter of an IR graph over the op registry: the reference the compiler lowers.

Each node becomes a kernel instance at construction (so an unsupported op refuses at compile
time); `GraphRunner(feeds, scope)` walks the nodes in order over a name → value environment.
Subgraph attributes (If/Loop/Scan bodies) become nested GraphRunners that read the enclosing
environment through `scope`.
"""
import typing
from collections import ChainMap

import numpy as np

from rtd.errors import Code, RtdError

from .fused import fused_kernel
from .ir import RTD_DOMAIN, Graph, Node
from .ops import lookup

TRACE_VALUE_BYTES = 1 << 16   # larger computed values are kept as shapes once nothing reads them


class TracedShape(typing.NamedTuple):
    """What a trace keeps of a large value nothing reads any more: not an array, so no pass can
    fold it into a constant, only read its shape and dtype."""
    shape: tuple
    dtype: np.dtype


def op_refusal(e: RtdError, node: Node, opsets: dict) -> RtdError:
    """A kernel's E_OP_UNSUPPORTED, naming the ONNX op (domain, type, opset) before its own words."""
    if e.code is not Code.E_OP_UNSUPPORTED or node.domain == RTD_DOMAIN:
        return e
    return RtdError(e.code, f"{node.domain or 'ai.onnx'} {node.op_type} (opset {opsets[node.domain]}): {e.detail}")


class OnHost:
    """A host-only kernel (`on_device` False) in a device graph's interpreter: its device inputs
    brought to the host and its outputs taken back, a copy each way per call (a planned run
    cuts the graph where fewest bytes cross instead: kernels/partition.py)."""

    def __init__(self, kernel, xp):
        self.kernel, self.xp, self.needs_scope = kernel, xp, kernel.needs_scope

    def run(self, *inputs, **scope):
        results = self.kernel.run(*(self.xp.asnumpy(x) if isinstance(x, self.xp.ndarray) else x for x in inputs), **scope)
        return tuple(self.xp.asarray(v) if isinstance(v, np.ndarray) and v.dtype != object else v for v in results)


def make_kernel(node: Node, opsets: dict, xp=np):
    """The kernel instance for one node; GRAPH attributes become subgraph runners; a host-only
    kernel in a device graph is built on NumPy and wrapped (OnHost)."""
    if node.domain == RTD_DOMAIN:
        return fused_kernel(node, xp, lambda inner: make_kernel(inner, opsets, xp))
    cls = lookup(node.domain, node.op_type, opsets[node.domain])
    if not cls.on_device and xp is not np:
        return OnHost(make_kernel(node, opsets, np), xp)
    attrs = {}
    for key, value in node.attrs.items():
        if isinstance(value, Graph):
            value = subgraph.PlannedSubgraph(value, xp)
        elif isinstance(value, list) and value and isinstance(value[0], Graph):
            value = [subgraph.PlannedSubgraph(g, xp) for g in value]
        attrs[key] = value
    n_outputs = len(node.outputs)
    while n_outputs and not node.outputs[n_outputs - 1]:
        n_outputs -= 1  # trailing unnamed outputs are not asked for
    try:
        return cls(attrs, xp, n_outputs=n_outputs)
    except RtdError as e:
        raise op_refusal(e, node, opsets) from None
    except Exception as e:  # an attribute value a kernel's setup cannot use: the model is at fault
        raise RtdError(Code.E_MODEL_INVALID, f"{node.op_type} {node.name!r}: {type(e).__name__}: {str(e)[:160]}") from None


class GraphRunner:
    """Run an IR graph node by node; `__call__(feeds, scope=None) -> [outputs]`."""

    def __init__(self, graph: Graph, xp=np):
        self.xp = xp
        self.graph = graph
        self.constants = {k: xp.asarray(v) for k, v in graph.constants.items()}
        self.input_names = list(graph.inputs)
        self.output_names = list(graph.outputs)
        self.output_dtypes = list(graph.output_dtypes)
        self.nodes = [(node, make_kernel(node, graph.opsets, xp)) for node in graph.nodes]
        # per node, the values it reads or writes for the last time (graph outputs are kept)
        last = {}
        for step, (node, _) in enumerate(self.nodes):
            for name in node.inputs + node.implicit + node.outputs:
                last[name] = step
        self.last_reads = [[] for _ in self.nodes]
        for name, step in last.items():
            if name and name not in self.output_names:
                self.last_reads[step].append(name)

    def __call__(self, feeds: dict, scope=None) -> list:
        env = self.trace(feeds, scope)
        return [env[name] for name in self.output_names]

    def trace(self, feeds: dict, scope=None) -> ChainMap:
        """Run the graph; the environment of every value it computed (a shape/value record).

        A computed value over TRACE_VALUE_BYTES that no later node reads is replaced by its
        `TracedShape`, so a traced run holds about what a planned run holds rather than every
        activation at once (the signature passes then leave such a value computed at run time)."""
        env = ChainMap({}, feeds, self.constants, *([scope] if scope is not None else []))
        computed = env.maps[0]
        for (node, kernel), done in zip(self.nodes, self.last_reads):
            args = [env[name] if name else None for name in node.inputs]
            try:
                results = kernel.run(*args, scope=env) if kernel.needs_scope else kernel.run(*args)
            except RtdError as e:
                raise op_refusal(e, node, self.graph.opsets) from None
            for name, value in zip(node.outputs, results):
                if name:
                    env[name] = value
            for name in done:
                value = computed.get(name)
                if isinstance(value, np.ndarray) and value.nbytes > TRACE_VALUE_BYTES:
                    computed[name] = TracedShape(value.shape, value.dtype)
        return env


# Last, and at import time (a confined worker cannot import later): control-flow bodies are planned
# by kernels/subgraph.py, which builds on this module's GraphRunner and make_kernel.
from . import subgraph  # noqa: E402
