"""Sibling products: MatMulBias nodes of one signature that share their weight, bias and activation and
whose rows none of them computes, run as one product over all their rows.

An unrolled recurrence (an exporter's loop over LSTM cells: captcha_crnn's two directions of 20 steps)
projects each step's input by the same weight, one row at a time; each of those products reads the whole
weight for one row, and a row is too little work to share among threads. The step inputs do not depend
on the recurrence, so their products can run first, together: Concat of the rows, one MatMulBias, and a
Gather of each node's rows back under its own output name. The recurrent products (the previous step's
output times R) each depend on the one before and stay as they are.
"""
import numpy as np

from ..ir import RTD_DOMAIN, Graph, Node, dataflow_order


def _independent(graph: Graph, members: list) -> list:
    """The largest subset found of `members` none of whose rows is computed, even indirectly, from another
    one's output: those whose rows depend on a member are dropped until none left does."""
    chosen = members
    while len(chosen) > 1:
        bit = {id(node): 1 << i for i, node in enumerate(chosen)}
        upstream = {}   # value name -> the chosen members it is computed from (bits)
        for node in graph.nodes:
            mask = bit.get(id(node), 0)
            for name in node.inputs + node.implicit:
                mask |= upstream.get(name, 0)
            for name in node.outputs:
                upstream[name] = mask
        kept = [node for node in chosen if not upstream.get(node.inputs[0], 0)]
        if len(kept) == len(chosen):
            break
        chosen = kept
    return chosen


def batch_sibling_products(graph: Graph, shapes: dict) -> Graph:
    """Sibling MatMulBias nodes (module docstring) as one; `shapes` gains the new values' shapes."""
    groups: dict = {}
    for node in graph.nodes:
        if node.op_type != "MatMulBias" or node.domain != RTD_DOMAIN or node.inputs[0] not in shapes \
                or any(name not in graph.constants for name in node.inputs[1:] if name):
            continue
        shape, dtype = shapes[node.inputs[0]]
        if len(shape) == 2 and node.outputs[0] in shapes:
            groups.setdefault((tuple(node.inputs[1:]), repr(sorted(node.attrs.items())), np.dtype(dtype).str), []).append(node)
    taken = set(shapes) | set(graph.constants)
    changed = False
    for members in groups.values():
        chosen = _independent(graph, members) if len(members) > 1 else []
        if len(chosen) < 2:
            continue
        first = chosen[0]
        stacked, product = (_fresh(f"{first.outputs[0]}__{what}", taken) for what in ("rows", "product"))
        (_, k), a_dtype = shapes[first.inputs[0]]
        (_, n), y_dtype = shapes[first.outputs[0]]
        rows = [shapes[node.inputs[0]][0][0] for node in chosen]
        shapes[stacked], shapes[product] = ((sum(rows), k), a_dtype), ((sum(rows), n), y_dtype)
        added = [Node("Concat", "", [node.inputs[0] for node in chosen], [stacked], {"axis": 0}),
                 Node("MatMulBias", RTD_DOMAIN, [stacked, *first.inputs[1:]], [product], dict(first.attrs))]
        start = 0
        for node, count in zip(chosen, rows):
            picks = _fresh(f"{node.outputs[0]}__picks", taken)
            graph.constants[picks] = np.arange(start, start + count, dtype=np.int64)
            added.append(Node("Gather", "", [product, picks], [node.outputs[0]], {"axis": 0}))
            start += count
        gone = {id(node) for node in chosen}
        graph.nodes = [node for node in graph.nodes if id(node) not in gone] + added
        changed = True
    if changed:
        graph.nodes = dataflow_order(graph.nodes)
    return graph


def _fresh(name: str, taken: set) -> str:
    while name in taken:
        name += "_"
    taken.add(name)
    return name
