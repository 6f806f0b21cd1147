"""Small queries and edits the passes share: who produces/consumes a value, constant scalars."""
import numpy as np

from ..ir import Graph, Node


class Index:
    """Producer and consumer maps of a graph, rebuilt by each pass that needs them."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.producer = graph.producers()
        self.consumers = graph.consumers()
        self.pinned = set(graph.outputs) | {n for node in graph.nodes for n in node.implicit}

    def uses(self, name: str) -> list:
        return self.consumers.get(name, [])

    def only(self, name: str, op_type: str):
        """The producer of `name` if it is an ai.onnx `op_type` whose output only one node reads."""
        node = self.producer.get(name)
        if node is None or node.op_type != op_type or node.domain != "" or name in self.pinned:
            return None
        return node if len(self.uses(name)) == 1 else None

    def next(self, name: str, op_type: str):
        """The single ai.onnx `op_type` consumer of `name`, if `name` has exactly one use."""
        uses = self.uses(name)
        if len(uses) != 1 or name in self.pinned:
            return None
        node = uses[0]
        return node if node.op_type == op_type and node.domain == "" else None

    def constant(self, name: str):
        return self.graph.constants.get(name)

    def scalar(self, name: str):
        value = self.graph.constants.get(name)
        if value is None or value.size != 1 or value.dtype.kind not in "fiu":
            return None
        return float(value.reshape(-1)[0])

    def other(self, node: Node, name: str):
        """The other operand of a binary node one of whose operands is `name`."""
        a, b = (node.inputs + ["", ""])[:2]
        if a == name:
            return b
        if b == name:
            return a
        return None


def near(value, target: float, tol: float = 1e-3) -> bool:
    return value is not None and abs(value - target) <= tol * max(1.0, abs(target))


def reduce_axes(index: Index, node: Node):
    """A Reduce* node's axes whether given as attribute (old opsets) or input (opset 18)."""
    if len(node.inputs) > 1 and node.inputs[1]:
        axes = index.constant(node.inputs[1])
        return None if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]
    return node.attrs.get("axes")


def replace_node(graph: Graph, old: Node, new: Node) -> None:
    """Put `new` where `old` was; what `old` fed on now dies in the dead-node pass."""
    graph.nodes[graph.nodes.index(old)] = new
