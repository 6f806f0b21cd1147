"""QDQ fusion: the QuantizeLinear/DequantizeLinear pairs a static QDQ export puts around every
op, turned into the integer ops onnxruntime turns them into (its QDQ transformer), so a QDQ
model runs in 8 bits as its QOperator twin does instead of in float between round trips.

- DQ(x) → Conv(·, DQ(w), DQ(b)) [→ Relu] → Q  ⇒  QLinearConv on the quantized tensors;
- DQ(x) → GlobalAveragePool → Q  ⇒  com.microsoft QLinearGlobalAveragePool;
- DQ(x, s, z) → MaxPool / Flatten / Reshape / Transpose / Squeeze / Unsqueeze → Q(·, s, z)  ⇒
  the op on the quantized tensor (it only moves or picks values, and dequantizing is monotonic).

Runs before constant folding, which would otherwise turn the weights' DQ into float weights.
Only 8-bit tensors, per-tensor activations and per-tensor or per-output-channel weights fuse;
anything else keeps its float path.
"""
import numpy as np

from ..ir import Graph, Node
from .rewrite import Index, replace_node

EIGHT_BIT = (np.dtype(np.uint8), np.dtype(np.int8))
MOVES_VALUES = {"MaxPool", "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze"}
MICROSOFT = "com.microsoft"


def _quantized(node: Node | None, index: Index, op_type: str, weight: bool = False):
    """(q, scale, zero_point) names of an 8-bit per-tensor `op_type` node (per-channel along axis
    0 allowed for a weight), or None."""
    if node is None or node.op_type != op_type or node.domain != "" or node.attrs.get("block_size", 0):
        return None
    inputs = (node.inputs + ["", ""])[:3]
    scale, zero_point = index.constant(inputs[1]), index.constant(inputs[2]) if inputs[2] else None
    if scale is None or scale.dtype != np.float32 or (inputs[2] and zero_point is None):
        return None
    if scale.size != 1 and not (weight and scale.ndim == 1 and node.attrs.get("axis", 1) == 0):
        return None
    if zero_point is None or zero_point.dtype not in EIGHT_BIT or zero_point.shape != scale.shape:
        return None   # the integer ops need the zero point (and its 8-bit type) spelled out
    return inputs


def _same_constant(index: Index, a: str, b: str) -> bool:
    x, y = index.constant(a), index.constant(b)
    return x is not None and y is not None and x.dtype == y.dtype and np.array_equal(x, y)


def _dequantized_input(index: Index, name: str, weight: bool = False):
    return _quantized(index.producer.get(name), index, "DequantizeLinear", weight)


def _only_quantize(index: Index, name: str):
    """The QuantizeLinear that is the single reader of `name`, as (node, inputs), or (None, None)."""
    node = index.next(name, "QuantizeLinear")
    inputs = _quantized(node, index, "QuantizeLinear")
    return (node, inputs) if inputs else (None, None)


def _conv(graph: Graph, index: Index, conv: Node) -> bool:
    x = _dequantized_input(index, conv.inputs[0])
    w = _dequantized_input(index, conv.inputs[1], weight=True)
    if x is None or w is None or index.constant(w[0]) is None or index.constant(w[0]).dtype not in EIGHT_BIT:
        return False
    bias = ""
    if len(conv.inputs) > 2 and conv.inputs[2]:
        b = index.producer.get(conv.inputs[2])
        b_inputs = (b.inputs + ["", ""])[:3] if b is not None and b.op_type == "DequantizeLinear" else None
        q_bias = index.constant(b_inputs[0]) if b_inputs else None
        if q_bias is None or q_bias.dtype != np.int32 or (b_inputs[2] and np.any(index.constant(b_inputs[2]) != 0)):
            return False
        bias = b_inputs[0]   # onnxruntime adds the int32 bias as it is (its scale is x_scale · w_scale)
    last = conv
    relu = index.next(conv.outputs[0], "Relu")
    if relu is not None:
        last = relu
    q, q_inputs = _only_quantize(index, last.outputs[0])
    if q is None:
        return False
    if relu is not None:   # a Relu is only redundant when the output's zero point is its type's minimum
        zero_point = index.constant(q_inputs[2])
        if zero_point.reshape(-1)[0] != np.iinfo(zero_point.dtype).min:
            return False
    inputs = [x[0], x[1], x[2], w[0], w[1], w[2], q_inputs[1], q_inputs[2]] + ([bias] if bias else [])
    replace_node(graph, q, Node("QLinearConv", "", inputs, [q.outputs[0]], dict(conv.attrs), name=conv.name))
    return True


def _global_average_pool(graph: Graph, index: Index, pool: Node) -> bool:
    x = _dequantized_input(index, pool.inputs[0])
    q, q_inputs = _only_quantize(index, pool.outputs[0])
    if x is None or q is None:
        return False
    graph.opsets.setdefault(MICROSOFT, 1)
    replace_node(graph, q, Node("QLinearGlobalAveragePool", MICROSOFT, [x[0], x[1], x[2], q_inputs[1], q_inputs[2]],
                                [q.outputs[0]], {"channels_last": 0}, name=pool.name))
    return True


def _moves_values(graph: Graph, index: Index, node: Node) -> bool:
    x = _dequantized_input(index, node.inputs[0])
    q, q_inputs = _only_quantize(index, node.outputs[0])
    if x is None or q is None or any(o for o in node.outputs[1:]):
        return False   # MaxPool's indices output: leave it
    if not (_same_constant(index, x[1], q_inputs[1]) and _same_constant(index, x[2], q_inputs[2])):
        return False
    replace_node(graph, q, Node(node.op_type, "", [x[0]] + node.inputs[1:], [q.outputs[0]], dict(node.attrs),
                                name=node.name))
    return True


FUSIONS = {"Conv": _conv, "GlobalAveragePool": _global_average_pool, **{op: _moves_values for op in MOVES_VALUES}}


def fuse_qdq(graph: Graph) -> Graph:
    index = Index(graph)
    for node in list(graph.nodes):
        fusion = FUSIONS.get(node.op_type) if node.domain == "" else None
        if fusion is not None and fusion(graph, index, node):
            index = Index(graph)   # the rewrite changed who reads what
    return graph
