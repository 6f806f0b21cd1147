"""Pattern fusions: node groups exporters emit, replaced by one fused kernel (domain "rtd").

Each pass puts the fused node where the group's last node was and leaves the rest to the
dead-node pass (an intermediate something else still reads simply stays computed).
"""
import math

import numpy as np

from ..constant import read_only
from ..ir import RTD_DOMAIN, Graph, Node
from ..ops.op_batch_normalization import inference_affine
from .rewrite import Index, near, reduce_axes, replace_node


def _fused(op_type: str, inputs: list, outputs: list, **attrs) -> Node:
    return Node(op_type, RTD_DOMAIN, inputs, outputs, attrs)


def _last_axis_reduce(index: Index, node, op_type: str) -> bool:
    return node is not None and node.op_type == op_type and reduce_axes(index, node) == [-1] and node.attrs.get("keepdims", 1) == 1


def fold_conv_batchnorm(graph: Graph) -> Graph:
    """BatchNormalization (inference) after a Conv with constant weights folds into the Conv."""
    index = Index(graph)
    c = graph.constants
    for bn in list(graph.nodes):
        if bn.op_type != "BatchNormalization" or bn.domain != "" or bn.attrs.get("training_mode", 0):
            continue
        if any(o for o in bn.outputs[1:]) or not all(n in c for n in bn.inputs[1:5]):
            continue
        conv = index.only(bn.inputs[0], "Conv")
        if conv is None or conv.inputs[1] not in c or (len(conv.inputs) > 2 and conv.inputs[2] not in c):
            continue
        scale, bias, mean, var = (c[n].astype(np.float64) for n in bn.inputs[1:5])
        w = c[conv.inputs[1]]
        if any(p.shape != (w.shape[0],) for p in (scale, bias, mean, var)):
            continue  # spatial=0 (opset < 9) keeps per-position statistics: not a per-channel fold
        factor = scale / np.sqrt(var + bn.attrs.get("epsilon", 1e-5))
        conv_bias = c[conv.inputs[2]].astype(np.float64) if len(conv.inputs) > 2 else 0.0
        w_name, b_name = bn.outputs[0] + "__w", bn.outputs[0] + "__b"
        # read-only (frozen): the compiled convolution packs and keeps only weights that cannot change
        c[w_name] = read_only((w * factor.reshape(-1, *[1] * (w.ndim - 1))).astype(w.dtype))
        c[b_name] = read_only(((conv_bias - mean) * factor + bias).astype(w.dtype))
        replace_node(graph, bn, Node("Conv", "", [conv.inputs[0], w_name, b_name], [bn.outputs[0]], dict(conv.attrs)))
    return graph


def fuse_layernorm(graph: Graph) -> Graph:
    """ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div (then Mul gamma, Add beta), and ONNX
    LayerNormalization over the last axis whose statistics outputs nobody reads → LayerNorm."""
    index = Index(graph)
    for div in list(graph.nodes):
        if div.op_type == "LayerNormalization" and div.domain == "" and div.attrs.get("axis", -1) == -1 \
                and not any(index.uses(o) or o in index.pinned for o in div.outputs[1:] if o):
            replace_node(graph, div, _fused("LayerNorm", list(div.inputs), div.outputs[:1], epsilon=div.attrs.get("epsilon", 1e-5)))
            continue
        if div.op_type != "Div" or div.domain != "":
            continue
        sub, sqrt = index.producer.get(div.inputs[0]), index.only(div.inputs[1], "Sqrt")
        add = sqrt and index.only(sqrt.inputs[0], "Add")
        var = add and index.only(add.inputs[0], "ReduceMean")
        eps = add and index.scalar(add.inputs[1])
        pow_ = var and index.only(var.inputs[0], "Pow")
        if not (sub and sub.op_type == "Sub" and pow_ and eps is not None and near(index.scalar(pow_.inputs[1]), 2.0)):
            continue
        mean = index.producer.get(sub.inputs[1])
        x = sub.inputs[0]
        if pow_.inputs[0] != sub.outputs[0] or not _last_axis_reduce(index, var, "ReduceMean") \
                or not _last_axis_reduce(index, mean, "ReduceMean") or mean.inputs[0] != x or len(index.uses(sub.outputs[0])) != 2:
            continue
        last, gamma, beta = div, "", ""
        mul = index.next(div.outputs[0], "Mul")
        if mul is not None and index.other(mul, last.outputs[0]) in graph.constants:
            last, gamma = mul, index.other(mul, div.outputs[0])
            bias = index.next(mul.outputs[0], "Add")
            if bias is not None and index.other(bias, mul.outputs[0]) in graph.constants:
                last, beta = bias, index.other(bias, mul.outputs[0])
        inputs = [x, gamma, beta] if beta else ([x, gamma] if gamma else [x])
        replace_node(graph, last, _fused("LayerNorm", inputs, [last.outputs[0]], epsilon=eps))
    return graph


def fuse_softmax(graph: Graph) -> Graph:
    """Exp(x - ReduceMax(x)) / ReduceSum(...) over the last axis, and ONNX Softmax(axis=-1) → Softmax."""
    index = Index(graph)
    for node in list(graph.nodes):
        if node.domain != "":
            continue
        default_axis = -1 if graph.opsets[""] >= 13 else 1  # before 13: flatten at axis, last axis only if -1
        if node.op_type == "Softmax" and node.attrs.get("axis", default_axis) == -1:
            replace_node(graph, node, _fused("Softmax", list(node.inputs), list(node.outputs), axis=-1))
            continue
        if node.op_type != "Div":
            continue
        exp, total = index.producer.get(node.inputs[0]), index.only(node.inputs[1], "ReduceSum")
        if not (exp and exp.op_type == "Exp" and _last_axis_reduce(index, total, "ReduceSum") and total.inputs[0] == exp.outputs[0]):
            continue
        if len(index.uses(exp.outputs[0])) != 2 or exp.outputs[0] in index.pinned:
            continue
        x = exp.inputs[0]
        shifted = index.only(x, "Sub")
        if shifted is not None and _last_axis_reduce(index, index.producer.get(shifted.inputs[1]), "ReduceMax") \
                and index.producer[shifted.inputs[1]].inputs[0] == shifted.inputs[0]:
            x = shifted.inputs[0]
        replace_node(graph, node, _fused("Softmax", [x], list(node.outputs), axis=-1))
    return graph


def _gelu_tail(index: Index, core: Node, x: str):
    """After Erf(x/√2) or Tanh(...): Add 1, Mul x, Mul 0.5 in the orders exporters emit; the last node."""
    plus = index.next(core.outputs[0], "Add")
    if plus is None or not near(index.scalar(index.other(plus, core.outputs[0])), 1.0):
        return None
    times = index.next(plus.outputs[0], "Mul")
    if times is None:
        return None
    other = index.other(times, plus.outputs[0])
    if other == x:
        half = index.next(times.outputs[0], "Mul")
        return half if half is not None and near(index.scalar(index.other(half, times.outputs[0])), 0.5) else None
    halved = index.producer.get(other)
    if halved is not None and halved.op_type == "Mul" and x in halved.inputs and near(index.scalar(index.other(halved, x)), 0.5):
        return times
    return None


def _tanh_core_input(index: Index, tanh: Node):
    """x when tanh's input is √(2/π)·(x + 0.044715·x³); None otherwise."""
    scaled = index.only(tanh.inputs[0], "Mul")
    if scaled is None:
        return None
    for inner_name in scaled.inputs:
        if near(index.scalar(index.other(scaled, inner_name)), math.sqrt(2 / math.pi)):
            inner = index.only(inner_name, "Add")
            if inner is None:
                return None
            for x in inner.inputs:
                cubic = index.only(index.other(inner, x), "Mul")
                if cubic is None:
                    continue
                for cube in cubic.inputs:
                    power = index.only(cube, "Pow")
                    if power is not None and power.inputs[0] == x and near(index.scalar(power.inputs[1]), 3.0) \
                            and near(index.scalar(index.other(cubic, cube)), 0.044715):
                        return x
    return None


def fuse_gelu(graph: Graph) -> Graph:
    """x·½(1 + erf(x/√2)) and x·½(1 + tanh(√(2/π)(x + 0.044715x³))) → Gelu."""
    index = Index(graph)
    for node in list(graph.nodes):
        if node.domain != "" or node.op_type not in ("Erf", "Tanh"):
            continue
        if node.op_type == "Erf":
            scaled = index.producer.get(node.inputs[0])
            if scaled is None or len(index.uses(node.inputs[0])) != 1 or scaled.op_type not in ("Div", "Mul"):
                continue
            x = scaled.inputs[0]
            factor = index.scalar(scaled.inputs[1])
            if not near(factor, math.sqrt(2) if scaled.op_type == "Div" else 1 / math.sqrt(2)):
                continue
            attrs = {"approximate": "none", "scale": factor, "scale_op": scaled.op_type}  # erf's argument as the graph rounds it
        else:
            x = _tanh_core_input(index, node)
            attrs = {"approximate": "tanh"}
        last = x and _gelu_tail(index, node, x)
        if last:
            replace_node(graph, last, _fused("Gelu", [x], [last.outputs[0]], **attrs))
    return graph


def fuse_attention(graph: Graph) -> Graph:
    """MatMul(q, kᵀ) → scale (Mul/Div) → [Add mask] → Softmax → MatMul(·, v) → Attention."""
    index = Index(graph)
    for out in list(graph.nodes):
        if out.op_type != "MatMul" or out.domain != "":
            continue
        soft = index.producer.get(out.inputs[0])
        if soft is None or soft.op_type != "Softmax" or soft.domain != RTD_DOMAIN or len(index.uses(out.inputs[0])) != 1:
            continue
        mask = ""
        scores = soft.inputs[0]
        masked = index.only(scores, "Add")
        if masked is not None:
            for name in masked.inputs:
                scaler = index.producer.get(name)
                if scaler is not None and scaler.op_type in ("Mul", "Div") and len(index.uses(name)) == 1:
                    scores, mask = name, index.other(masked, name)
                    break
        scaler = index.only(scores, "Mul") or index.only(scores, "Div")
        if scaler is None:
            continue
        factor = index.scalar(scaler.inputs[1])
        qk_name = scaler.inputs[0]
        if factor is None and scaler.op_type == "Mul":
            factor, qk_name = index.scalar(scaler.inputs[0]), scaler.inputs[1]
        qk = index.only(qk_name, "MatMul")
        if factor is None or qk is None:
            continue
        inputs = [*qk.inputs, out.inputs[1]] + ([mask] if mask else [])
        replace_node(graph, out, _fused("Attention", inputs, list(out.outputs), scale=factor, scale_op=scaler.op_type))
    return graph


def _activation(index: Index, name: str):
    """The Relu or fused Gelu that alone reads `name`: (node, activation name, its attributes) or
    (None, None, {}); an Erf-form Gelu's attributes say how its graph scaled erf's argument."""
    uses = index.uses(name)
    if len(uses) == 1 and name not in index.pinned:
        act = uses[0]
        if act.domain == "" and act.op_type == "Relu":
            return act, "Relu", {}
        if act.domain == RTD_DOMAIN and act.op_type == "Gelu":
            if act.attrs["approximate"] == "tanh":
                return act, "GeluTanh", {}
            return act, "Gelu", {"gelu_scale_op": act.attrs["scale_op"], "gelu_scale": act.attrs["scale"]}
    return None, None, {}


def _gemm_as_matmul(graph: Graph, index: Index, gemm: Node):
    """(a, contiguous W, bias name or "") when a Gemm is a plain a @ W + bias; None otherwise."""
    a = gemm.attrs
    b = index.constant(gemm.inputs[1])
    if a.get("alpha", 1.0) != 1.0 or a.get("transA", 0) or b is None or b.ndim != 2:
        return None
    bias = gemm.inputs[2] if len(gemm.inputs) > 2 else ""
    c = index.constant(bias) if bias else None
    if bias and (c is None or a.get("beta", 1.0) != 1.0 or c.size != (b.shape[0] if a.get("transB", 0) else b.shape[1])):
        return None
    # named after the weight, not the Gemm: an unrolled recurrence's steps multiply by one weight, which is then
    # viewed (and packed) once, not once per step (a CRNN's 80 Gemms: 80 copies of 4 weights). transB's weight is
    # the stored matrix's transpose as a view, which the GEMM packs column by column: no copy (a transposing copy
    # of a 1024 x 1024 weight took 7 ms of the compile and 4 MiB)
    w_name = gemm.inputs[1] + ("__transposed" if a.get("transB", 0) else "__contiguous")
    if w_name not in graph.constants:
        w = b.T if a.get("transB", 0) else b
        graph.constants[w_name] = read_only(w if w.flags.c_contiguous or w.flags.f_contiguous else np.ascontiguousarray(w))
    if bias:
        graph.constants[bias + "__flat"] = read_only(c.reshape(-1))
        bias += "__flat"
    return gemm.inputs[0], w_name, bias


def fuse_matmul_bias(graph: Graph) -> Graph:
    """MatMul(a, W) + b, or Gemm(a, B, C) with alpha 1, then an optional Relu or Gelu, with
    constant weights and bias → MatMulBias (a Gemm for any rank of `a`, into a planned buffer)."""
    index = Index(graph)
    for mm in list(graph.nodes):
        if mm.domain != "" or mm.op_type not in ("MatMul", "Gemm"):
            continue
        if mm.op_type == "Gemm":
            parts = _gemm_as_matmul(graph, index, mm)
            if parts is None:
                continue
            act, activation, scaling = _activation(index, mm.outputs[0])
            last = act or mm
            replace_node(graph, last, _fused("MatMulBias", list(parts), [last.outputs[0]], activation=activation, **scaling))
            if last is not mm:
                graph.nodes.remove(mm)
            continue
        w = index.constant(mm.inputs[1])
        add = index.next(mm.outputs[0], "Add")
        if w is None or w.ndim != 2 or add is None:
            continue
        bias_name = index.other(add, mm.outputs[0])
        bias = index.constant(bias_name)
        if bias is None or bias.ndim != 1 or bias.size != w.shape[1] or bias.dtype != w.dtype:
            continue
        act, activation, scaling = _activation(index, add.outputs[0])
        last = act or add
        replace_node(graph, last, _fused("MatMulBias", [mm.inputs[0], mm.inputs[1], bias_name], [last.outputs[0]],
                                         activation=activation, **scaling))
        if last is not add:
            graph.nodes.remove(add)
    return graph


def fuse_conv_activation(graph: Graph) -> Graph:
    """Conv, then an Add of one other tensor and/or a Relu that alone read its result →
    ConvActivation: the add and the Relu run in place on the Conv's own fresh output (ResNet's
    Conv+Add+Relu block ends, every Conv+Relu) instead of each writing a new buffer."""
    index = Index(graph)
    taken = set()  # an Add two Convs feed (ResNet's shortcut) fuses with the first only
    for conv in list(graph.nodes):
        if conv.op_type != "Conv" or conv.domain != "":
            continue
        y = conv.outputs[0]
        add = index.next(y, "Add")
        other = index.other(add, y) if add is not None else ""
        if other == y or (add is not None and id(add) in taken):
            add, other = None, ""
        act, activation, _ = _activation(index, (add or conv).outputs[0])
        if activation != "Relu":
            act = None
        last = act or add
        if last is None or (act is not None and id(act) in taken):
            continue
        taken.update(id(n) for n in (add, act) if n is not None)
        inputs = (conv.inputs + ["", ""])[:3] + [other]
        replace_node(graph, last, _fused("ConvActivation", inputs, [last.outputs[0]], conv=dict(conv.attrs), relu=act is not None))
        graph.nodes.remove(conv)
        if add is not None and last is not add:
            graph.nodes.remove(add)
    return graph


def square_pows(graph: Graph, shapes: dict) -> Graph:
    """Pow(x, 2) of a float x (the exponent one constant value, broadcasting nothing) as Mul(x, x): NumPy's power
    loops compute an exponent of 2 as the one rounding of x * x (bit for bit, checked over 10 million float32
    values), and a chain of Muls runs compiled where chain.c has no Pow (a streaming model's spectrum magnitude)."""
    index = Index(graph)
    for node in list(graph.nodes):
        if node.op_type != "Pow" or node.domain != "" or len(node.inputs) != 2 or node.inputs[0] not in shapes:
            continue
        exponent = index.constant(node.inputs[1])
        shape, dtype = shapes[node.inputs[0]]
        if exponent is None or exponent.size != 1 or exponent.ndim > len(shape) or np.dtype(dtype).kind != "f" \
                or float(exponent.reshape(-1)[0]) != 2.0:
            continue
        replace_node(graph, node, Node("Mul", "", [node.inputs[0], node.inputs[0]], list(node.outputs), {}))
    return graph


def batchnorm_as_affine(graph: Graph, shapes: dict) -> Graph:
    """BatchNormalization (inference, constant per-channel statistics) that no Conv took in: Mul by one factor per
    channel, then Add one shift per channel, the two constants computed as the op computes them (so the two
    roundings are the op's own). An element-wise pair then joins the chain fusion, and a chain fed by a
    convolution runs in its epilogue: a Keras net's Conv, ReLU, BatchNormalization costs one pass over memory."""
    c = graph.constants
    for bn in list(graph.nodes):
        if bn.op_type != "BatchNormalization" or bn.domain != "" or bn.attrs.get("training_mode", 0) \
                or any(o for o in bn.outputs[1:]) or not all(n in c for n in bn.inputs[1:5]) or bn.inputs[0] not in shapes:
            continue
        shape, dtype = shapes[bn.inputs[0]]
        scale, bias, mean, var = (c[n] for n in bn.inputs[1:5])
        if len(shape) < 2 or np.dtype(dtype).kind != "f" or any(p.shape != (shape[1],) or p.dtype != dtype for p in (scale, bias, mean, var)):
            continue   # per-position statistics (spatial=0), or mixed dtypes: the op's kernel
        factor, shift = inference_affine(np, scale, bias, mean, var, bn.attrs.get("epsilon", 1e-5), dtype)
        per_channel = (shape[1],) + (1,) * (len(shape) - 2)
        name = bn.outputs[0]
        c[name + "__factor"] = read_only(factor.reshape(per_channel))
        c[name + "__shift"] = read_only(shift.reshape(per_channel))
        shapes[name + "__scaled"] = (tuple(shape), dtype)
        at = graph.nodes.index(bn)
        graph.nodes[at:at + 1] = [Node("Mul", "", [bn.inputs[0], name + "__factor"], [name + "__scaled"], {}),
                                  Node("Add", "", [name + "__scaled", name + "__shift"], [name], {})]
    return graph
