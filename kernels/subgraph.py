"""Control-flow bodies (If branches, Loop and Scan bodies) run from plans, as the top-level graph
does: each body is lowered once (fusions included) with the enclosing scope's names as extra
inputs, and each shape signature of (formal inputs, scope values) gets a slot-indexed `Plan`
after one interpreted run. A body used to be interpreted node by node on every call, a name
lookup and a Python dict per value, unfused: most of a small streaming model's time (a
voice-activity model's whole network sits in an If branch).

A body whose signatures keep changing (a Loop whose carried values grow) stops planning after
MAX_SIGNATURES and stays interpreted; sequences and optionals are always interpreted; on a GPU
the body is interpreted (its ops run on the device either way).
"""
import copy
import threading

import numpy as np

from .graph import GraphRunner
from .ir import Graph
from .lower import lower, lower_signature
from .plan import Plan

MAX_SIGNATURES = 4


class PlannedSubgraph:
    """A body: `__call__(feeds, scope) -> [outputs]`, with GraphRunner's names and dtypes."""

    def __init__(self, graph: Graph, xp=np):
        self.runner = GraphRunner(graph, xp)   # builds every kernel: refusals happen now
        self.input_names, self.output_names = self.runner.input_names, self.runner.output_names
        self.output_dtypes = self.runner.output_dtypes
        self.xp, self.graph = xp, graph
        self.free = sorted(graph.free_names())
        self._lowered = None
        self._plans: dict = {}
        self._planning = xp is np
        self._lock = threading.Lock()

    def __call__(self, feeds: dict, scope=None) -> list:
        return self.run([feeds[name] for name in self.input_names], self.bind(scope), scope)

    def bind(self, scope) -> list:
        """The scope's values of the names the body reads from outside, in `run`'s order (a Loop binds
        them once for all its iterations)."""
        return [scope[name] for name in self.free] if self._planning else []

    def run(self, inputs: list, bound: list, scope=None) -> list:
        """The outputs for the formal `inputs` (in input_names' order) and the `bound` scope values."""
        if not self._planning:
            return self.runner(dict(zip(self.input_names, inputs)), scope)
        values = inputs + bound
        plan = self.plan(values)
        if plan is not None:
            return plan.run(values)
        feeds = dict(zip(self.input_names, inputs))
        if not all(isinstance(v, np.ndarray) for v in values):
            return self.runner(feeds, scope)
        env = self.runner.trace(feeds, scope)
        outputs = [env[name] for name in self.output_names]
        with self._lock:
            if len(self._plans) >= MAX_SIGNATURES:
                self._planning = False   # shapes that keep changing: interpreting costs less than planning
                return outputs
            trace = dict(env.maps[0], **dict(zip(self.input_names + self.free, values)))
            graph, shapes, static = lower_signature(self._lowered_graph(), trace, xp=self.xp)
            self._plans[self._signature(values)] = Plan(graph, shapes, static, self.xp)
        return outputs

    def plan(self, values: list) -> Plan | None:
        """The plan of these values' signature (inputs, then bound scope values), if one is made."""
        key = []
        for v in values:   # one pass (an If's branch looks its plan up on every call)
            if not isinstance(v, np.ndarray):
                return None
            key.append((v.shape, v.dtype))
        return self._plans.get(tuple(key))

    @staticmethod
    def _signature(values: list) -> tuple:
        return tuple((v.shape, v.dtype) for v in values)

    def _lowered_graph(self) -> Graph:
        """The body as a graph of its own (scope names as inputs), lowered once, on first need."""
        if self._lowered is None:
            body = copy.copy(self.graph)
            body.nodes, body.constants = list(body.nodes), dict(body.constants)
            body.inputs = self.input_names + self.free
            self._lowered = lower(body)
        return self._lowered
